"""metrics.enable_tensorboard: the event files a run writes, read back by a
reader written here from the format's definition (TFRecord framing with
masked CRC-32C, the Event / Summary protocol buffers), independent of the
writer in src/io/tensorboard.cc.

Checks that a run's file sits where torchtitan puts it
(<dump_folder>/<save_tb_folder>/<YYYYmmdd-HHMM>/events.out.tfevents.*), that
every record's checksums hold, that it starts with the file-version event,
and that each logged step's scalars are the metrics JSONL's values of the
same run (as float32, TensorBoard's simple_value), validation included; that
a resumed run writes a new file and leaves the first as it was; that a
save_tb_folder that cannot be a folder is exit 2 before anything is written;
and that nothing is written with the flag off.

Usage: test_tensorboard.py <remat binary> (run from the repository root).
"""
import json
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from io_kit import REMAT, SMALL, check, exit_status, run

TB = ["--metrics.enable_tensorboard", "true"]


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(blob):
    """The records' payloads, or None where a length or checksum is wrong."""
    out, at = [], 0
    while at < len(blob):
        if at + 12 > len(blob):
            return None
        header = blob[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", blob[at + 8:at + 12])
        data = blob[at + 12:at + 12 + length]
        if header_crc != masked(crc32c(header)) or len(data) != length or \
                at + 16 + length > len(blob):
            return None
        (data_crc,) = struct.unpack("<I", blob[at + 12 + length:at + 16 + length])
        if data_crc != masked(crc32c(data)):
            return None
        out.append(data)
        at += 16 + length
    return out


def varint(buf, at):
    value, shift = 0, 0
    while True:
        byte = buf[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def fields(buf):
    """{field number: [values]} of one protocol buffer message."""
    out, at = {}, 0
    while at < len(buf):
        key, at = varint(buf, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = varint(buf, at)
        elif wire == 1:
            value, at = buf[at:at + 8], at + 8
        elif wire == 2:
            length, at = varint(buf, at)
            value, at = buf[at:at + length], at + length
        elif wire == 5:
            value, at = buf[at:at + 4], at + 4
        else:
            raise ValueError(f"wire type {wire}")
        out.setdefault(number, []).append(value)
    return out


def events(path):
    """[(wall_time, step, file_version or None, [(tag, value)])], or None."""
    payloads = records(Path(path).read_bytes())
    if payloads is None:
        return None
    out = []
    for data in payloads:
        f = fields(data)
        wall = struct.unpack("<d", f[1][0])[0]
        step = f.get(2, [0])[0]
        version = f[3][0].decode() if 3 in f else None
        scalars = []
        for summary in f.get(5, []):
            for value in fields(summary).get(1, []):
                v = fields(value)
                scalars.append((v[1][0].decode(), struct.unpack("<f", v[2][0])[0]))
        out.append((wall, step, version, scalars))
    return out


def as_float32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def event_files(root):
    return sorted(p for p in Path(root).rglob("*") if p.is_file())


def check_run(tmp):
    metrics = Path(tmp) / "m.jsonl"
    started = time.time()
    result = run(["train"], tmp, ["--training.steps", "4", "--metrics.log_freq", "2",
                                  "--metrics.jsonl_path", str(metrics), "--validation.enabled",
                                  "true", "--validation.freq", "2", "--validation.steps", "1",
                                  *TB])
    check(result.returncode == 0, f"a run with tensorboard trains (exit {result.returncode}: "
                                  f"{result.stderr[-300:]})")
    files = event_files(Path(tmp) / "tb")
    check(len(files) == 1, f"one event file under <dump_folder>/tb ({[str(f) for f in files]})")
    if len(files) != 1:
        return None
    path = files[0]
    folder_ok = re.fullmatch(r"\d{8}-\d{4}", path.parent.name) and path.parent.parent.name == "tb"
    check(bool(folder_ok), f"in a <YYYYmmdd-HHMM> folder of tb/ ({path.parent})")
    name = re.fullmatch(r"events\.out\.tfevents\.(\d{10})\.(.+)\.(\d+)\.0", path.name)
    check(bool(name) and name.group(2) == socket.gethostname(),
          f"named events.out.tfevents.<seconds>.<host>.<pid>.0 ({path.name})")
    check(f"tensorboard: events written to {path}" in result.stdout, "the run says where")
    got = events(path)
    check(got is not None, "every record's length and checksums hold")
    if not got:
        return path
    wall, _, version, _ = got[0]
    check(version == "brain.Event:2" and started - 1 <= wall <= time.time() + 1,
          f"the first event is the file version, at the run's time ({version}, {wall})")
    by_step = {}
    for _, step, _, scalars in got[1:]:
        check(len(scalars) == 1, "one scalar per event, as add_scalar writes them")
        for tag, value in scalars:
            by_step.setdefault(step, {})[tag] = value
    lines = [json.loads(l) for l in metrics.read_text().splitlines()]
    logged = [l for l in lines if "loss" in l]
    validated = [l for l in lines if "validation_loss" in l]
    check([l["step"] for l in logged] == [1, 2, 4], "steps 1, 2 and 4 are logged")
    tags = {"loss_metrics/global_avg_loss", "grad_norm", "ntokens_seen", "throughput(tps)",
            "tflops", "mfu(%)", "hfu(%)", "time_metrics/end_to_end(s)", "memory/max_active(GiB)",
            "memory/max_active(%)", "lr"}
    for line in logged:
        s = by_step.get(line["step"], {})
        check(tags <= set(s), f"step {line['step']}: every scalar ({sorted(tags - set(s))} missing)")
        if not tags <= set(s):
            continue
        expected = {"loss_metrics/global_avg_loss": line["loss"], "grad_norm": line["grad_norm"],
                    "lr": line["lr"], "throughput(tps)": line["tps"], "mfu(%)": 100 * line["mfu"],
                    "hfu(%)": 100 * line["hfu"],
                    "memory/max_active(GiB)": line["peak_bytes"] / 2**30,
                    "ntokens_seen": line["step"] * 2 * 64}
        for tag, value in expected.items():
            check(abs(s[tag] - as_float32(value)) <= 1e-6 * abs(value),
                  f"step {line['step']}: {tag} {s[tag]} is the metrics file's {value}")
        # tflops against the log line's, printed to 2 decimals (the metrics file
        # has no tflops, and the peak behind mfu rises when a step beats it).
        printed = re.search(rf"^step:\s+{line['step']}\s.*tflops: ([\d.]+)", result.stdout, re.M)
        check(bool(printed) and abs(s["tflops"] - float(printed.group(1))) <= 0.005 + 1e-6,
              f"step {line['step']}: tflops {s['tflops']} is the log line's "
              f"{printed.group(1) if printed else None}")
        check(s["time_metrics/end_to_end(s)"] > 0, f"step {line['step']}: a step's seconds")
    check([l["step"] for l in validated] == [2, 4], "validation at steps 2 and 4")
    for line in validated:
        v = by_step.get(line["step"], {}).get("validation_metrics/loss")
        check(v == as_float32(line["validation_loss"]),
              f"step {line['step']}: validation_metrics/loss {v} is {line['validation_loss']}")
    return path


def check_resume(tmp):
    ckpt = ["--checkpoint.enable", "true", "--checkpoint.interval", "2"]
    first = run(["train"], tmp, ["--training.steps", "2", *ckpt, *TB])
    files = event_files(Path(tmp) / "tb")
    before = files[0].read_bytes() if len(files) == 1 else b""
    second = run(["train"], tmp, ["--training.steps", "4", *ckpt, *TB,
                                  "--checkpoint.load", str(Path(tmp) / "checkpoint" / "step-2.safetensors")])
    check(first.returncode == 0 and second.returncode == 0,
          f"a run and its resumption train ({first.stderr[-200:]}{second.stderr[-200:]})")
    after = event_files(Path(tmp) / "tb")
    check(len(after) == 2, f"the resumed run writes a second event file ({len(after)})")
    check(len(files) == 1 and files[0].read_bytes() == before,
          "the first run's file is left as it was")
    resumed = [p for p in after if p not in files]
    got = events(resumed[0]) if resumed else None
    steps = sorted({step for _, step, _, scalars in (got or [])[1:] if scalars})
    check(steps == [3, 4], f"the second file holds the resumed steps ({steps})")


def check_refusals(tmp):
    blocker = Path(tmp) / "a_file"
    blocker.write_text("not a folder\n")
    metrics = Path(tmp) / "m.jsonl"
    result = run(["train"], tmp, ["--training.steps", "1", "--metrics.save_tb_folder",
                                  str(blocker / "tb"), "--metrics.jsonl_path", str(metrics), *TB])
    check(result.returncode == 2 and "metrics.save_tb_folder" in result.stderr,
          f"a save_tb_folder under a file is exit 2 naming the key ({result.returncode}: "
          f"{result.stderr.strip()[-200:]})")
    check(not metrics.exists(), "nothing is written before the check")
    # The run's own event folder taken by a file (made for this minute and
    # the next): exit 2, and the metrics file of the run before is intact.
    root = Path(tmp) / "taken" / "tb"
    root.mkdir(parents=True)
    for t in (time.time(), time.time() + 60):
        (root / time.strftime("%Y%m%d-%H%M", time.localtime(t))).write_text("x\n")
    metrics.write_text('{"step": 1}\n')
    taken = run(["train"], Path(tmp) / "taken", ["--training.steps", "1", "--metrics.jsonl_path",
                                                 str(metrics), *TB])
    check(taken.returncode == 2 and "metrics.save_tb_folder" in taken.stderr,
          f"an event folder that cannot be made is exit 2 naming the key ({taken.returncode}: "
          f"{taken.stderr.strip()[-200:]})")
    check(metrics.read_text() == '{"step": 1}\n', "the earlier metrics file is left intact")
    off = run(["train"], tmp, ["--training.steps", "1"])
    check(off.returncode == 0 and not (Path(tmp) / "tb").exists(), "off by default: no tb folder")


def check_ranks(tmp):
    """Two data-parallel ranks: rank 0 writes, or with save_for_all_ranks each rank
    into its own rank_<r> folder, its own tps (the same loss: the ranks agree)."""
    mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"]
    for all_ranks in ["false", "true"]:
        dump = Path(tmp) / f"all_{all_ranks}"
        result = subprocess.run([*mpirun, REMAT, "train", *SMALL, "--training.threads", "1",
                                 "--training.steps", "2", "--job.dump_folder", str(dump),
                                 "--parallelism.data_parallel_replicate_degree", "2",
                                 *TB, "--metrics.save_for_all_ranks", all_ranks],
                                capture_output=True, text=True)
        check(result.returncode == 0, f"2 ranks, save_for_all_ranks {all_ranks}: trains "
                                      f"({result.stderr[-300:]})")
        files = event_files(dump / "tb")
        folders = sorted(f.parent.name for f in files)
        expected = ["rank_0", "rank_1"] if all_ranks == "true" else [files[0].parent.name if files else ""]
        check(folders == expected and (all_ranks == "true" or re.fullmatch(r"\d{8}-\d{4}", folders[0])),
              f"save_for_all_ranks {all_ranks}: event files in {folders}")
        losses = []
        for f in files:
            got = events(f) or []
            losses.append([v for _, _, _, sc in got for tag, v in sc
                           if tag == "loss_metrics/global_avg_loss"])
        check(all(len(l) == 2 for l in losses) and all(l == losses[0] for l in losses),
              f"save_for_all_ranks {all_ranks}: each file has both steps' loss, the same ({losses})")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        check_run(tmp)
    with tempfile.TemporaryDirectory() as tmp:
        check_resume(tmp)
    with tempfile.TemporaryDirectory() as tmp:
        check_refusals(tmp)
    with tempfile.TemporaryDirectory() as tmp:
        check_ranks(tmp)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
