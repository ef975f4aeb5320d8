"""Bad input exits with status 2, says what was wrong and touches no files (spec §1, §5, §6).

Every case runs remat in a fresh temporary directory (its working directory,
with the config copied there, --job.dump_folder and --metrics.jsonl_path inside
it) that already holds a checkpoint and a metrics file from an "earlier run".
Each case must:
  - exit with status exactly 2;
  - print to stderr a message naming the offending key or file and what was
    expected (checked as specific substrings);
  - print no traceback, "internal error" or abort;
  - create, modify or delete no file: the tree (names, sizes, mtimes) is the
    same afterwards and the pre-existing checkpoint and metrics file are
    byte-identical.

Usage: test_bad_inputs.py <path-to-remat>
"""
import json
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

REMAT = os.path.abspath(sys.argv[1])
REPO = Path(__file__).resolve().parents[2]
BASE_CONFIG = REPO / "configs" / "llama3_debug.toml"
SHORT = ["--training.steps", "1", "--training.seq_len", "32", "--training.local_batch_size", "2"]
TIMEOUT_S = 60
FORBIDDEN = ["Traceback", "internal error", "terminate called", "Aborted", "Segmentation fault",
             "AddressSanitizer", "core dumped"]

# Contents of the files an earlier run left behind; they must survive every case.
OLD_CHECKPOINT = b"earlier checkpoint: must not be overwritten\n" * 16
OLD_METRICS = b'{"step": 1, "loss": 7.5}\n{"step": 2, "loss": 7.25}\n'


# ---- input files -------------------------------------------------------------

def npy_bytes(tokens, dtype="<u2", shape=None, fortran_order="False"):
    """A NumPy v1.0 .npy file of a 1-D array, written by hand (no numpy needed)."""
    shape = len(tokens) if shape is None else shape
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': (%d,), }" % (dtype, fortran_order,
                                                                        shape)
    pad = 64 - (10 + len(header) + 1) % 64
    header = header + " " * pad + "\n"
    fmt = {"<u2": "H", "<u4": "I", "<i4": "i", "<i8": "q"}[dtype]
    data = struct.pack("<%d%s" % (len(tokens), fmt), *tokens)
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data


GOOD_TOKENS = [(i * 37) % 2048 for i in range(1000)]


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)


def config_text():
    return BASE_CONFIG.read_text()


def config_with(extra_in_training="", appended=""):
    text = config_text()
    if extra_in_training:
        text = text.replace("[training]\n", "[training]\n" + extra_in_training + "\n", 1)
    return text + appended


# ---- one case ----------------------------------------------------------------

class Case:
    def __init__(self, name, args, expect, *, command="train", config=None, files=None,
                 with_config_flag=True, regexes=(), not_in_stdout=()):
        self.name = name
        self.args = args              # extra arguments, after the defaults
        self.expect = expect          # substrings stderr must contain
        self.regexes = regexes        # regular expressions stderr must match
        self.not_in_stdout = not_in_stdout  # substrings stdout must not contain
        self.command = command
        self.config = config          # TOML text for config.toml (None: the base config)
        self.files = files or {}      # relative path -> bytes/str, or None for a directory
        self.with_config_flag = with_config_flag


def snapshot(root):
    tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            tree[os.path.relpath(p, root)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return tree


def run_case(case, seed_checkpoint):
    with tempfile.TemporaryDirectory(prefix="remat-bad-") as tmp:
        tmp = Path(tmp)
        write(tmp / "config.toml", case.config if case.config is not None else config_text())
        for rel, data in case.files.items():
            if data is None:
                (tmp / rel).mkdir(parents=True, exist_ok=True)
            elif data == "SEED":
                write(tmp / rel, seed_checkpoint)
            elif data == "FIFO":
                os.mkfifo(tmp / rel)
            elif data == "NULLDEV":  # a copy of /dev/null (root only)
                os.mknod(tmp / rel, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            elif isinstance(data, str) and data.startswith("SYMLINK:"):
                os.symlink(data[len("SYMLINK:"):], tmp / rel)
            elif isinstance(data, str) and data.startswith("HARDLINK:"):  # of a file made before
                os.link(tmp / data[len("HARDLINK:"):], tmp / rel)
            elif callable(data):
                write(tmp / rel, data(seed_checkpoint))
            else:
                write(tmp / rel, data)
        dump = tmp / "outputs"
        old_checkpoint = dump / "checkpoint" / "step-1.safetensors"
        old_seed = dump / "checkpoint" / "step-0.safetensors"
        old_metrics = tmp / "metrics.jsonl"
        write(old_checkpoint, OLD_CHECKPOINT)
        write(old_seed, OLD_CHECKPOINT)
        write(old_metrics, OLD_METRICS)
        before = snapshot(tmp)

        argv = [REMAT] + ([case.command] if case.command is not None else [])
        if case.with_config_flag:
            argv += ["--config", "config.toml"]
        argv += ["--job.dump_folder", str(dump), "--metrics.jsonl_path", str(old_metrics)]
        argv += SHORT + case.args
        try:
            proc = subprocess.run(argv, cwd=tmp, capture_output=True, text=True,
                                  timeout=TIMEOUT_S, errors="replace")
            rc, out, err = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as e:
            rc, out, err = "timeout", str(e.stdout or ""), str(e.stderr or "")

        problems = []
        if rc != 2:
            problems.append(f"exit status {rc}, expected 2")
        for s in case.expect:
            if s not in err:
                problems.append(f"stderr lacks {s!r}")
        for r in case.regexes:
            if not re.search(r, err):
                problems.append(f"stderr does not match /{r}/")
        for s in case.not_in_stdout:
            if s in out:
                problems.append(f"stdout contains {s!r}")
        for s in FORBIDDEN:
            if s in out or s in err:
                problems.append(f"output contains {s!r}")
        after = snapshot(tmp)
        created = sorted(set(after) - set(before))
        deleted = sorted(set(before) - set(after))
        changed = sorted(k for k in set(before) & set(after)
                         if before[k] != after[k] and not os.path.isdir(tmp / k))
        if created:
            problems.append(f"created {created}")
        if deleted:
            problems.append(f"deleted {deleted}")
        if changed:
            problems.append(f"changed {changed}")
        for path, data in ((old_checkpoint, OLD_CHECKPOINT), (old_seed, OLD_CHECKPOINT),
                           (old_metrics, OLD_METRICS)):
            if not path.is_file() or path.read_bytes() != data:
                problems.append(f"{path.relative_to(tmp)} lost its contents")
        message = " | ".join(line for line in err.strip().splitlines()[:3]) or "(no stderr)"
        if problems and out.strip():
            message += " || stdout: " + " | ".join(out.strip().splitlines()[-3:])
        return problems, message


# ---- the cases -----------------------------------------------------------------

def make_seed_checkpoint():
    """A seed checkpoint of the debug model at dim 128 (the eval cases use dim 256)."""
    with tempfile.TemporaryDirectory(prefix="remat-seed-") as tmp:
        shutil.copy(BASE_CONFIG, Path(tmp) / "config.toml")
        subprocess.run([REMAT, "train", "--config", "config.toml", "--job.dump_folder", "out",
                        *SHORT, "--checkpoint.create_seed_checkpoint", "true",
                        "--model.dim", "128"],
                       cwd=tmp, capture_output=True, text=True, check=True, timeout=TIMEOUT_S)
        found = list(Path(tmp, "out").rglob("*.safetensors"))
        assert len(found) == 1, f"expected one seed checkpoint, found {found}"
        return found[0].read_bytes()


def with_header(seed, edit):
    """The seed checkpoint with its safetensors header JSON changed by edit(header)."""
    n = struct.unpack("<Q", seed[:8])[0]
    header = json.loads(seed[8:8 + n])
    edit(header)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + seed[8 + n:]


def with_nul_in_header(seed):
    """The seed checkpoint, its header followed by a NUL and garbage (nlohmann
    stopped at the NUL: the file loaded)."""
    n = struct.unpack("<Q", seed[:8])[0]
    text = seed[8:8 + n].rstrip(b" ") + b"\0garbage"
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + seed[8 + n:]


def raw_safetensors(header_text):
    """A safetensors file of a header written as text (no data)."""
    b = header_text.encode()
    b += b" " * ((8 - len(b) % 8) % 8)
    return struct.pack("<Q", len(b)) + b


DEEP = "[" * 200000 + "]" * 200000  # printing or copying it recursed past the stack


def with_step(step):
    return lambda seed: with_header(seed, lambda h: h["__metadata__"].update(step=step))


def with_overlap(seed):
    """The second tensor (by offset) made to start inside the first."""
    def edit(h):
        names = sorted((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"][0])
        second = h[names[1]]
        begin, end = second["data_offsets"]
        second["data_offsets"] = [begin - 4, end - 4]
    return with_header(seed, edit)


def with_flipped_byte(seed):
    n = struct.unpack("<Q", seed[:8])[0]
    data = bytearray(seed)
    data[8 + n + 100] ^= 0x40  # inside the first tensor
    return bytes(data)


IS_ROOT = os.geteuid() == 0


def cases():
    good_npy = npy_bytes(GOOD_TOKENS)
    truncated_npy = npy_bytes(GOOD_TOKENS, shape=2000)  # header says 2000 tokens, 1000 follow
    big_tokens = list(GOOD_TOKENS)
    big_tokens[500] = 4000
    AC = "--activation_checkpoint."
    return [
        # -- config keys and overrides
        Case("unknown section in TOML", [], ["bogus", "unknown section", "known sections"],
             config=config_with(appended="\n[bogus]\nx = 1\n")),
        Case("unknown key in TOML", [], ["training.stepz", "unknown key", "known keys",
                                         "config.toml"],
             config=config_with(extra_in_training="stepz = 3")),
        Case("unknown override key", ["--training.stepz", "3"],
             ["training.stepz", "unknown key", "known keys"]),
        Case("unknown override section", ["--trainin.steps", "3"],
             ["trainin", "unknown section", "known sections"]),
        Case("override without section", ["--steps", "3"],
             ["--steps", "expected --section.key"]),
        Case("override without dashes", ["training.steps=3"],
             ["training.steps=3", "expected --section.key"]),
        Case("override with two dots", ["--training.steps.x", "3"],
             ["--training.steps.x", "expected --section.key"]),
        # -- wrong types
        Case("steps = \"ten\" in TOML", [], ["training.steps", '"ten"', "expected an integer"],
             config=config_text().replace("steps = 100", 'steps = "ten"')),
        Case("--training.steps abc", ["--training.steps", "abc"],
             ["training.steps", '"abc"', "expected an integer"]),
        Case("--activation_checkpoint.log_mm_flops maybe", [AC + "log_mm_flops", "maybe"],
             ["activation_checkpoint.log_mm_flops", '"maybe"', "expected true or false"]),
        # -- out of range
        Case("steps -1", ["--training.steps", "-1"],
             ["training.steps", "-1", "expected an integer >= 0"]),
        Case("seq_len 0", ["--training.seq_len", "0"],
             ["training.seq_len", "= 0", "expected an integer > 0"]),
        Case("seq_len -8", ["--training.seq_len", "-8"],
             ["training.seq_len", "-8", "expected an integer > 0"]),
        Case("local_batch_size 0", ["--training.local_batch_size", "0"],
             ["training.local_batch_size", "= 0", "expected an integer > 0"]),
        Case("local_batch_size -2", ["--training.local_batch_size", "-2"],
             ["training.local_batch_size", "-2", "expected an integer > 0"]),
        # gradient accumulation (training.global_batch_size; SHORT's local batch is 2)
        Case("global_batch_size 0", ["--training.global_batch_size", "0"],
             ["training.global_batch_size", "= 0", "expected -1", "16777216"]),
        Case("global_batch_size -4", ["--training.global_batch_size", "-4"],
             ["training.global_batch_size", "-4", "expected -1"]),
        Case("global_batch_size 2^24 + 1", ["--training.global_batch_size", "16777217"],
             ["training.global_batch_size", "16777217", "16777216 (2^24)"]),
        Case("global_batch_size abc", ["--training.global_batch_size", "abc"],
             ["training.global_batch_size", '"abc"', "expected an integer"]),
        Case("global_batch_size 5 with local 2", ["--training.global_batch_size", "5"],
             ["training.global_batch_size = 5", "multiple of", "2 x 1 = 2"]),
        Case("global_batch_size 1 with local 2", ["--training.global_batch_size", "1"],
             ["training.global_batch_size = 1", "multiple of", "2 x 1 = 2"]),
        Case("plan: global_batch_size 3 with local 2", ["--training.global_batch_size", "3"],
             ["training.global_batch_size = 3", "multiple of"], command="plan"),
        # the chunked loss head (model.loss_chunk_rows)
        Case("loss_chunk_rows -1", ["--model.loss_chunk_rows", "-1"],
             ["model.loss_chunk_rows", "-1", "expected an integer in [0, 16777216"]),
        Case("loss_chunk_rows 2^24 + 1", ["--model.loss_chunk_rows", "16777217"],
             ["model.loss_chunk_rows", "16777217", "16777216 (2^24)"]),
        Case("loss_chunk_rows abc", ["--model.loss_chunk_rows", "abc"],
             ["model.loss_chunk_rows", '"abc"', 'expected a number or "auto"']),
        Case("loss_chunk_rows Auto (case matters)", ["--model.loss_chunk_rows", "Auto"],
             ["model.loss_chunk_rows", '"Auto"', 'expected a number or "auto"']),
        Case("loss_chunk_rows 1.5", ["--model.loss_chunk_rows", "1.5"],
             ["model.loss_chunk_rows", "1.5", "expected an integer"]),
        Case("plan: loss_chunk_rows -3", ["--model.loss_chunk_rows", "-3"],
             ["model.loss_chunk_rows", "-3"], command="plan"),
        Case("plan: --pareto in /proc/self/fd (a folder that exists but takes no files)",
             ["--pareto", "/proc/self/fd/1.svg"],
             ["--pareto", "cannot create '/proc/self/fd/1.svg'"], command="plan",
             regexes=[r"^(?![\s\S]*does not exist)"]),
        Case("plan: --pareto and --timeline at one path (one would overwrite the other)",
             ["--pareto", "out.svg", "--timeline", "./sub/../out.svg"],
             ["--pareto and --timeline", "out.svg", "expected a file for each"], command="plan",
             files={"sub": None}),
        Case("plan: --pareto names the .json --timeline writes beside its .svg (sweep 4: exit "
             "0, the front lost)", ["--pareto", "t.json", "--timeline", "t.svg"],
             ["--pareto and --timeline both name 't.json'",
              "the .json the timeline writes beside 't.svg'", "expected a file for each"],
             command="plan"),
        Case("plan: --timeline's .json is the config (hard link): nothing written, .svg kept",
             ["--timeline", "t.svg"],
             ["--timeline", "'t.json' is the config file this run reads"], command="plan",
             files={"t.json": "HARDLINK:config.toml", "t.svg": "old picture\n"}),
        Case("plan: --maximize throughput with --pareto (no picture of a search)",
             ["--maximize", "throughput", "--pareto", "p.svg"],
             ["--maximize throughput", "--pareto", "expected"], command="plan"),
        Case("plan: --timeline in a folder that does not exist",
             ["--timeline", "nodir/t.svg"],
             ["--timeline", "'nodir/t.svg'", "folder 'nodir' does not exist", "expected"],
             command="plan", regexes=[r"^(?!.*\.tmp)"]),
        Case("dim 250 with 16 heads", ["--model.dim", "250", "--model.n_heads", "16"],
             ["dim", "n_heads", "250", "16", "divisible"]),
        Case("16 heads, 5 kv heads", ["--model.n_heads", "16", "--model.n_kv_heads", "5"],
             ["n_kv_heads", "n_heads", "5", "16", "divisible"]),
        # -- data files
        Case("dataset_path missing", ["--training.dataset_path", "missing.npy"],
             ["missing.npy", "no such file"]),
        Case("dataset_path garbage .npy", ["--training.dataset_path", "garbage.npy"],
             ["garbage.npy", "not a NumPy .npy file", "expected"],
             files={"garbage.npy": os.urandom(256).replace(b"\x93", b"\x00")}),
        Case("dataset_path truncated .npy", ["--training.dataset_path", "short.npy"],
             ["short.npy", "truncated", "2000"], files={"short.npy": truncated_npy}),
        Case("checkpoint.export_dtype fp8", ["--checkpoint.export_dtype", "fp8"],
             ["checkpoint.export_dtype", "fp8", "expected", "bfloat16", "float16"]),
        Case("checkpoint.async_mode unknown", ["--checkpoint.async_mode", "background"],
             ["checkpoint.async_mode", "background", "expected", "async_with_pinned_mem"]),
        Case("checkpoint.load_step below -1", ["--checkpoint.load_step", "-5"],
             ["checkpoint.load_step", "-5", "expected", "-1 for the latest"]),
        Case("checkpoint.enable_first_step_checkpoint not a bool",
             ["--checkpoint.enable_first_step_checkpoint", "once"],
             ["checkpoint.enable_first_step_checkpoint", "once", "expected"]),
        Case("checkpoint.initial_load_model_weights_only not a bool",
             ["--checkpoint.initial_load_model_weights_only", "mostly"],
             ["checkpoint.initial_load_model_weights_only", "mostly", "expected"]),
        Case("checkpoint.keep_latest_k negative", ["--checkpoint.keep_latest_k", "-3"],
             ["checkpoint.keep_latest_k", "-3", "expected", "integer >= 0"]),
        Case("checkpoint.keep_latest_k not an integer", ["--checkpoint.keep_latest_k", "ten"],
             ["checkpoint.keep_latest_k", "ten", "expected"]),
        Case("checkpoint.last_save_model_weights_only not a bool",
             ["--checkpoint.last_save_model_weights_only", "sometimes"],
             ["checkpoint.last_save_model_weights_only", "sometimes", "expected"]),
        Case("a half-precision export of a sharded checkpoint",
             ["--checkpoint.export_dtype", "bfloat16", "--checkpoint.last_save_model_weights_only",
              "true", "--checkpoint.format", "sharded"],
             ["checkpoint.export_dtype", "bfloat16", "sharded", "single_file"]),
        Case("metrics.enable_tensorboard not a bool", ["--metrics.enable_tensorboard", "often"],
             ["metrics.enable_tensorboard", "often", "expected"]),
        Case("metrics.save_for_all_ranks not a bool", ["--metrics.save_for_all_ranks", "2"],
             ["metrics.save_for_all_ranks", "expected"]),
        Case("metrics.save_tb_folder under a regular file",
             ["--metrics.enable_tensorboard", "true", "--metrics.save_tb_folder", "../afile/tb"],
             ["metrics.save_tb_folder", "afile", "is a regular file, expected a folder"],
             files={"afile": "x"}),
        Case("dataset_path .npy whose header claims 10^11 tokens over 1000",
             ["--training.dataset_path", "claims.npy"],
             ["claims.npy", "truncated data", "100000000000 tokens", "2000 bytes follow"],
             files={"claims.npy": npy_bytes(GOOD_TOKENS, shape=10**11)}),
        Case("dataset_path token >= vocab", ["--training.dataset_path", "big.npy"],
             ["big.npy", "4000", "index 500", "expected", "2048"], files={"big.npy": npy_bytes(big_tokens)}),
        Case("dataset_path .npy whose fortran_order is a string, not a bool",
             ["--training.dataset_path", "str.npy"],
             ["str.npy", "fortran_order is the string 'False'", "expected True or False"],
             files={"str.npy": npy_bytes(GOOD_TOKENS, fortran_order="'False'")}),
        Case("dataset_path .npy whose descr is a bool, not a string",
             ["--training.dataset_path", "w.npy"], ["w.npy", "malformed header"],
             files={"w.npy": npy_bytes(GOOD_TOKENS).replace(b"'<u2'", b"False")}),
        Case("dataset_path is a directory", ["--training.dataset_path", "data_dir"],
             ["data_dir", "is a directory", "expected"], files={"data_dir": None}),
        Case("--config is a directory", ["--config", "cfg_dir"],
             ["cfg_dir", "is a directory", "expected a TOML file"],
             with_config_flag=False, files={"cfg_dir": None}),
        Case("--config missing file", ["--config", "nope.toml"], ["nope.toml", "no such file"],
             with_config_flag=False),
        # -- eval
        Case("eval: checkpoint.load missing file",
             ["--checkpoint.load", "nope.safetensors", "--validation.dataset", "val.npy"],
             ["nope.safetensors", "no such file", "expected a .safetensors file"],
             command="eval", files={"val.npy": good_npy}),
        Case("eval: truncated safetensors",
             ["--checkpoint.load", "cut.safetensors", "--validation.dataset", "val.npy"],
             ["cut.safetensors"], regexes=[r"expected|outside the file|larger than"],
             command="eval", files={"val.npy": good_npy, "cut.safetensors": "SEED-CUT"}),
        Case("eval: checkpoint of another model size",
             ["--checkpoint.load", "small.safetensors", "--validation.dataset", "val.npy"],
             ["small.safetensors", "tok_embeddings.weight"],
             regexes=[r"2048\D{1,3}128\b", r"2048\D{1,3}256\b"],
             command="eval", files={"val.npy": good_npy, "small.safetensors": "SEED"}),
        Case("eval: checkpoint of a deeper model (its extra layers would be dropped)",
             ["--checkpoint.load", "small.safetensors", "--validation.dataset", "val.npy",
              "--model.dim", "128", "--model.n_layers", "2"],
             ["small.safetensors", "layers.5.", "a layer this model does not have",
              "its layers: 2", "at least 6", "model.n_layers"],
             command="eval", files={"val.npy": good_npy, "small.safetensors": "SEED"}),
        Case("train: checkpoint.load of a deeper model",
             ["--checkpoint.load", "small.safetensors", "--model.dim", "128",
              "--model.n_layers", "1"],
             ["small.safetensors", "layers.5.", "a layer this model does not have"],
             files={"small.safetensors": "SEED"}),
        Case("llama3 with model.num_experts (a llama4 key it would ignore)",
             ["--model.num_experts", "4"],
             ["model.num_experts is set", 'model.name = "llama3"', "no mixture-of-experts",
              'model.name = "llama4"']),
        Case("plan: llama3 with model.score_func", ["--model.score_func", "sigmoid"],
             ["model.score_func is set", 'model.name = "llama3"'], command="plan"),
        Case("llama4 with fewer layers than its MoE interleave step (no MoE block)",
             ["--model.name", "llama4", "--model.n_layers", "1"],
             ["model.interleave_moe_layer_step = 2", "n_layers = 1", "no MoE block",
              "at most n_layers"]),
        Case("model.tokenizer gpt2 (a name, not a file)", ["--model.tokenizer", "gpt2"],
             ['model.tokenizer = "gpt2"', "no built-in tokenizer of that name", '"byte"',
              "tokenizer.json"]),
        # JSON nested 200,000 deep: a segfault (stack overflow) where a message
        # printed the value back, now refused before parsing.
        Case("tokenizer.json nested 200,000 deep", ["--model.tokenizer_path", "deep.json"],
             ["deep.json", "nested more than 512 deep"],
             files={"deep.json": '{"normalizer": ' + DEEP + '}'}),
        Case("checkpoint whose safetensors header nests 200,000 deep",
             ["--checkpoint.load", "deep.safetensors"],
             ["deep.safetensors", "header has arrays and objects nested more than 512 deep"],
             files={"deep.safetensors": raw_safetensors(
                 '{"x": {"dtype": %s, "shape": [], "data_offsets": [0, 0]}}' % DEEP)}),
        Case("dataset .jsonl line nested 200,000 deep", ["--training.dataset_path", "deep.jsonl"],
             ["deep.jsonl", "line 2", "nested more than 512 deep"],
             files={"deep.jsonl": '{"text": "fine"}\n{"text": "x", "meta": ' + DEEP + '}\n'}),
        Case("dataset .jsonl line with a NUL and garbage after its record",
             ["--training.dataset_path", "nul.jsonl"],
             ["nul.jsonl", "line 2", "a NUL byte at offset 13"],
             files={"nul.jsonl": '{"text": "%s"}\n{"text": "x"}\0{"broken\n' % ("ok " * 50)}),
        Case("checkpoint whose safetensors header has a NUL and garbage after it",
             ["--checkpoint.load", "nul.safetensors", "--model.dim", "128"],
             ["nul.safetensors", "header has a NUL byte at offset"],
             files={"nul.safetensors": with_nul_in_header}),
        Case("tokenizer.json whose vocab id is a nested array (quoted by its size)",
             ["--model.tokenizer_path", "arr.json"],
             ["arr.json", "an array of 3 elements", "expected an integer id"],
             files={"arr.json": '{"model": {"type": "BPE", "vocab": {"a": [1, [2], 3]}, '
                                '"merges": []}}'}),
        Case("model.tokenizer_path missing", ["--model.tokenizer_path", "x/tok.model"],
             ['model.tokenizer_path = "x/tok.model"', "no such file",
              "expected the path of a SentencePiece .model file"]),
        Case("validation.dataset shorter than a window",
             ["--validation.enabled", "true", "--validation.dataset", "val.npy"],
             ["validation", "'val.npy' (token ids): 16 tokens (too few)",
              "expected at least training.seq_len + 1 = 33 tokens"],
             files={"val.npy": npy_bytes(list(range(16)))}),
        Case("eval: --checkpoint.load an empty folder (not a checkpoint, not a cut save)",
             ["--checkpoint.load", "plain", "--validation.dataset", "val.npy"],
             ["'plain' holds neither index.json nor shard files: not a checkpoint"],
             command="eval", files={"plain": None, "val.npy": npy_bytes(list(range(80)))}),
        Case("eval: no --validation.dataset",
             ["--checkpoint.load", "small.safetensors"], ["validation.dataset"],
             regexes=[r"pass|expected|needs"], command="eval",
             files={"small.safetensors": "SEED"}),
        Case("eval: validation.dataset missing file",
             ["--checkpoint.load", "small.safetensors", "--validation.dataset", "nope.npy"],
             ["nope.npy", "no such file"], command="eval",
             files={"small.safetensors": "SEED"}),
        Case("eval: no --checkpoint.load", ["--validation.dataset", "val.npy"],
             ["checkpoint.load"], regexes=[r"pass|expected|needs"], command="eval",
             files={"val.npy": good_npy}),
        # -- command line
        Case("unknown command trian", [], ["trian", "unknown command", "train"], command="trian"),
        Case("missing --config", [], ["--config", "missing"], with_config_flag=False),
        Case("no command at all", [], ["command", "expected train", "usage"], command=None,
             with_config_flag=False),
        # -- enumerations
        Case("activation_checkpoint.mode sometimes", [AC + "mode", "sometimes"],
             ["activation_checkpoint.mode", '"sometimes"', "expected", '"selective"']),
        Case("selective_ac_option abc", [AC + "selective_ac_option", "abc"],
             ["activation_checkpoint.selective_ac_option", '"abc"', "expected", '"op"']),
        Case("lr_scheduler.decay_type exp", ["--lr_scheduler.decay_type", "exp"],
             ["lr_scheduler.decay_type", '"exp"', "expected", '"cosine"']),
        # -- issue 9, finding 1 and 7: outputs never replace devices, FIFOs, links or folders
        *([Case("metrics path is a copy of /dev/null", ["--metrics.jsonl_path", "null"],
                ["metrics.jsonl_path", "'null'", "character device"],
                files={"null": "NULLDEV"})] if IS_ROOT else []),
        Case("metrics path /dev/null", ["--metrics.jsonl_path", "/dev/null"],
             ["metrics.jsonl_path", "/dev/null", "character device"]),
        Case("metrics path is a FIFO", ["--metrics.jsonl_path", "m.fifo"],
             ["metrics.jsonl_path", "m.fifo", "FIFO"], files={"m.fifo": "FIFO"}),
        Case("metrics path is a symlink", ["--metrics.jsonl_path", "m.link"],
             ["metrics.jsonl_path", "m.link", "symbolic link"],
             files={"m.link": "SYMLINK:metrics.jsonl"}),
        Case("metrics path is a directory", ["--metrics.jsonl_path", "mdir"],
             ["metrics.jsonl_path", "mdir", "a directory"], files={"mdir": None}),
        Case("metrics path under a regular file", ["--metrics.jsonl_path", "afile/m.jsonl"],
             ["metrics.jsonl_path", "afile", "is a regular file, expected a folder"],
             files={"afile": "x"}),
        Case("dump_folder is a regular file",
             ["--job.dump_folder", "afile", "--checkpoint.enable", "true"],
             ["job.dump_folder", "afile", "is a regular file, expected a folder"],
             files={"afile": "x"}),
        Case("checkpoint.folder is a regular file",
             ["--checkpoint.enable", "true", "--checkpoint.folder", "cfile"],
             ["checkpoint.folder", "cfile", "is a regular file, expected a folder"],
             files={"outputs/cfile": "x"}),
        # An output never replaces a file the run reads, however it is spelled.
        Case("metrics path is the config file", ["--metrics.jsonl_path", "config.toml"],
             ["metrics.jsonl_path", "config.toml", "is the config file this run reads",
              "expected another file name"]),
        Case("metrics path is the dataset, spelled another way",
             ["--training.dataset_path", "d.txt", "--metrics.jsonl_path", "./d.txt"],
             ["metrics.jsonl_path", "./d.txt",
              "is the dataset (training.dataset_path) this run reads", "the same file as 'd.txt'"],
             files={"d.txt": "a line of training text\n" * 400}),
        Case("metrics path is the loaded checkpoint",
             ["--checkpoint.load", "small.safetensors", "--model.dim", "128",
              "--metrics.jsonl_path", "small.safetensors"],
             ["metrics.jsonl_path", "small.safetensors",
              "is the checkpoint (checkpoint.load) this run reads"],
             files={"small.safetensors": "SEED"}),
        Case("cost cache is the dataset (written while planning, before the data is read)",
             ["--activation_checkpoint.mode", "memory_budget",
              "--activation_checkpoint.memory_budget", "0.5",
              "--activation_checkpoint.cost_model", "measured",
              "--activation_checkpoint.cost_cache", "d.txt", "--training.dataset_path", "d.txt"],
             ["activation_checkpoint.cost_cache", "d.txt",
              "is the dataset (training.dataset_path) this run reads"],
             files={"d.txt": "a line of training text\n" * 400}),
        Case("cost cache names a file that is no op-time cache (it would be overwritten)",
             ["--activation_checkpoint.mode", "memory_budget",
              "--activation_checkpoint.memory_budget", "0.5",
              "--activation_checkpoint.cost_model", "measured",
              "--activation_checkpoint.cost_cache", "notes.txt"],
             ["activation_checkpoint.cost_cache", "'notes.txt'", "is not an op-time cache",
              "would overwrite it"],
             command="plan", files={"notes.txt": "my notes\n"}),
        Case("a save's temporary name is a folder (found at start-up, not after training)",
             ["--checkpoint.enable", "true", "--checkpoint.folder", "ck"],
             ["checkpoint.folder", "step-1.safetensors.tmp' exists and is a directory"],
             not_in_stdout=["step:"],  # refused before the first step
             files={"outputs/ck/step-1.safetensors.tmp": None}),
        Case("metrics path is a name a checkpoint save takes",
             ["--checkpoint.enable", "true", "--checkpoint.folder", "ck", "--metrics.jsonl_path",
              "outputs/ck/step-7.safetensors"],
             ["metrics.jsonl_path", "step-7.safetensors", "is a name the checkpoints in",
              "expected another file name"]),
        # Profiling outputs, found before the first step (they were found when
        # written, or silently took the open metrics file's name).
        Case("metrics path is a name a profile trace takes",
             ["--profiling.enable_profiling", "true", "--profiling.profile_freq", "1",
              "--metrics.jsonl_path", "outputs/profile_traces/iteration_1/rank0_trace.json"],
             ["metrics.jsonl_path", "is a name the profile traces in", "expected another file"],
             not_in_stdout=["step:"]),
        Case("metrics path is the memory snapshot's .json",
             ["--profiling.enable_memory_snapshot", "true",
              "--metrics.jsonl_path", "outputs/memory_snapshot/step-1.json"],
             ["metrics.jsonl_path", "is where the memory snapshot of step 1 goes"],
             not_in_stdout=["step:"]),
        Case("a profiled step's trace path is a folder",
             ["--profiling.enable_profiling", "true", "--profiling.profile_freq", "1"],
             ["profiling.save_traces_folder", "iteration_1/rank0_trace.json' exists and is a "
              "directory"],
             not_in_stdout=["step:"],
             files={"outputs/profile_traces/iteration_1/rank0_trace.json": None}),
        Case("a profiled step's iteration folder is a file",
             ["--profiling.enable_profiling", "true", "--profiling.profile_freq", "1"],
             ["profiling.save_traces_folder", "iteration_1' is a regular file, expected a folder"],
             not_in_stdout=["step:"], files={"outputs/profile_traces/iteration_1": "x"}),
        Case("the memory snapshot's .json is a link",
             ["--profiling.enable_memory_snapshot", "true"],
             ["profiling.save_memory_snapshot_folder", "step-1.json' exists and is a symbolic link"],
             not_in_stdout=["step:"],
             files={"notes.txt": "mine\n", "outputs/memory_snapshot": None,
                    "outputs/memory_snapshot/step-1.json": "SYMLINK:../../notes.txt"}),
        Case("too short a dataset with a checkpoint folder still to be made (none is made)",
             ["--checkpoint.enable", "true", "--checkpoint.folder", "fresh",
              "--training.dataset_path", "one.txt"],
             ["one.txt has 5 tokens, fewer than training.seq_len + 1"],
             files={"one.txt": "ab\n"}),
        # The harness's step-0 file stands for a seed runs already start from.
        Case("a seed checkpoint over the one already in the folder",
             ["--checkpoint.create_seed_checkpoint", "true"],
             ["checkpoint.create_seed_checkpoint", "step-0.safetensors' already exists",
              "does not replace one"]),
        # With checkpointing on, a run resumes from the latest checkpoint in its
        # folder (as torchtitan's does): here the harness's step-1 file, not one.
        Case("checkpointing on over a folder whose latest checkpoint is damaged",
             ["--checkpoint.enable", "true"],
             ["step-1.safetensors", "not a safetensors file",
              "the latest checkpoint in checkpoint.folder", "new job.dump_folder"],
             not_in_stdout=["step:"]),
        Case("checkpointing on over a folder whose latest checkpoint is another model's",
             ["--checkpoint.enable", "true", "--model.dim", "64"],
             ["step-3.safetensors", "has shape", "the latest checkpoint in checkpoint.folder"],
             not_in_stdout=["step:"], files={"outputs/checkpoint/step-3.safetensors": with_step("3")}),
        Case("checkpointing on over a folder whose latest checkpoint was renamed",
             ["--checkpoint.enable", "true", "--model.dim", "128"],
             ["step-3.safetensors", "records step 0, not the 3 of its name",
              "the latest checkpoint in checkpoint.folder"],
             not_in_stdout=["step:"], files={"outputs/checkpoint/step-3.safetensors": "SEED"}),
        Case("grads --out is its --tokens",
             ["--tokens", "val.npy", "--out", "val.npy", "--checkpoint.load",
              "small.safetensors", "--model.dim", "128"],
             ["--out", "val.npy", "is the .npy token file this run reads"], command="grads",
             files={"val.npy": good_npy, "small.safetensors": "SEED"}),
        Case("grads --out /dev/null",
             ["--tokens", "val.npy", "--out", "/dev/null", "--checkpoint.load",
              "small.safetensors", "--model.dim", "128"],
             ["--out", "/dev/null", "character device"], command="grads",
             files={"val.npy": good_npy, "small.safetensors": "SEED"}),
        Case("grads with a global batch of two microbatches (it writes one batch's)",
             ["--tokens", "val.npy", "--out", "g.safetensors", "--checkpoint.load",
              "small.safetensors", "--model.dim", "128", "--training.global_batch_size", "4"],
             ["grads", "training.global_batch_size = 4", "2 accumulated microbatches",
              "local_batch_size = 2"], command="grads",
             files={"val.npy": good_npy, "small.safetensors": "SEED"}),
        # -- findings 2, 3, 4, 6, 8: absurd sizes exit 2 before allocating
        Case("vocab_size 2^62", ["--model.vocab_size", "4611686018427387904"],
             ["model.vocab_size", "4611686018427387904", "expected"]),
        Case("seq_len 2^62", ["--training.seq_len", "4611686018427387904"],
             ["training.seq_len", "4611686018427387904", "expected"]),
        Case("local_batch_size 2^62", ["--training.local_batch_size", "4611686018427387904"],
             ["training.local_batch_size", "4611686018427387904", "expected"]),
        Case("ffn_dim_multiplier 1e-9", ["--model.ffn_dim_multiplier", "1e-9"],
             ["model.ffn_dim_multiplier", "expected"]),
        Case("threads 100000", ["--training.threads", "100000"],
             ["training.threads", "100000", "expected an integer in [0, "]),
        Case("threads 2^63-1", ["--training.threads", "9223372036854775807"],
             ["training.threads", "9223372036854775807", "expected"]),
        Case("dim 2^31", ["--model.dim", "2147483648"], ["model.dim", "2147483648", "expected"]),
        Case("memory.limit 0.5B (under a byte: was no limit at all)", ["--memory.limit", "0.5B"],
             ["memory.limit", "0.5B", "from 1B to 4EiB"]),
        Case("plan: data_parallel_shard_degree 2^31 (was an internal error)",
             ["--parallelism.data_parallel_shard_degree", "2147483648"],
             ["parallelism.data_parallel_shard_degree", "2147483648", "from 1 to 1048576"],
             command="plan"),
        Case("plan: data_parallel_shard_degree 2^32+1 (was read as 1)",
             ["--parallelism.data_parallel_shard_degree", "4294967297"],
             ["parallelism.data_parallel_shard_degree", "from 1 to 1048576"], command="plan"),
        Case("plan: 2048 replicas of 1024 shards (over 2^20 ranks)",
             ["--parallelism.data_parallel_shard_degree", "1024",
              "--parallelism.data_parallel_replicate_degree", "2048"],
             ["data_parallel_replicate_degree", "at most 1048576"], command="plan"),
        Case("a NUL in a TOML path (\\u0000 would cut the path short)", [],
             ["job.dump_folder", "NUL character"],
             config=config_text().replace('dump_folder = "./outputs"',
                                          'dump_folder = "out\\u0000/../../victim"')),
        Case("seed 2^64-1 (beyond int64)", ["--training.seed", "18446744073709551615"],
             ["training.seed", "18446744073709551615", "from -2^63 to 2^63 - 1"]),
        Case("optimizer.eps 1e-320 (a number, but subnormal)", ["--optimizer.eps", "1e-320"],
             ["optimizer.eps", "1e-320", "finite and 0 or between 2.2e-308 and 1.8e308"]),
        Case("training.max_norm inf", ["--training.max_norm", "inf"],
             ["training.max_norm", "inf", "finite"]),
        Case("seed +-5", ["--training.seed", "+-5"], ["training.seed", "+-5", "expected an integer"],
             regexes=[r"expected an integer$"]),
        Case("n_layers 2000000", ["--model.n_layers", "2000000"],
             ["model.n_layers", "2000000", "expected at most"]),
        # The largest layer count allowed, at a memory its model state cannot
        # fit: refused at once (the search for an AC mode or batch size that
        # fits took minutes, quadratic in the layers, before it was skipped).
        Case("n_layers 16384, model state over memory.limit",
             ["--model.n_layers", "16384", "--memory.limit", "8GiB"],
             ["memory.limit", "the model state alone", "no AC mode or batch size fits"]),
        Case("llama4 tokens x top_k over 2^24",
             ["--model.name", "llama4", "--training.seq_len", "65536",
              "--training.local_batch_size", "512"], ["top_k", "2^24"]),
        # -- finding 9: checkpoint step metadata parsed strictly
        Case("checkpoint step 1e3", ["--checkpoint.load", "s.safetensors", "--model.dim", "128"],
             ["s.safetensors", '"1e3"', "expected a non-negative decimal integer"],
             files={"s.safetensors": with_step("1e3")}),
        Case("checkpoint step -5", ["--checkpoint.load", "s.safetensors", "--model.dim", "128"],
             ["s.safetensors", '"-5"', "expected a non-negative decimal integer"],
             files={"s.safetensors": with_step("-5")}),
        Case("checkpoint data.ranks 0 (no run has zero ranks)",
             ["--checkpoint.load", "s.safetensors", "--model.dim", "128"],
             ["s.safetensors", 'data.ranks metadata "0"', "expected a positive decimal integer"],
             files={"s.safetensors": lambda seed: with_header(
                 seed, lambda h: h["__metadata__"].update({"data.ranks": "0"}))}),
        Case("checkpoint.load names the checkpoint folder, not a checkpoint in it (it was "
             "called an incomplete sharded checkpoint; sweep 4)",
             ["--checkpoint.load", "outputs/checkpoint"],
             ["'outputs/checkpoint' is a folder of checkpoints, not one",
              "such as the latest, 'outputs/checkpoint/step-1.safetensors'"]),
        Case("checkpoint.load names a folder of step folders none of which is complete",
             ["--checkpoint.load", "ck"],
             ["'ck' is a folder of checkpoints none of which is complete",
              "(such as 'step-2') have no index.json"],
             files={"ck/step-2": None, "ck/step-2/shard-0-of-1.safetensors": "partial"}),
        Case("checkpoint settings digest of 100000 characters: the message quotes its start",
             ["--checkpoint.load", "s.safetensors", "--model.dim", "128"],
             ["s.safetensors", "aaaa... (100000 bytes)", "expected 16 lowercase hex digits"],
             files={"s.safetensors": lambda seed: with_header(
                 seed, lambda h: h["__metadata__"].update({"job.settings_digest": "a" * 100000}))}),
        Case("checkpoint settings digest not 16 hex digits",
             ["--checkpoint.load", "s.safetensors", "--model.dim", "128"],
             ["s.safetensors", 'job.settings_digest metadata "12ab"',
              "expected 16 lowercase hex digits"],
             files={"s.safetensors": lambda seed: with_header(
                 seed, lambda h: h["__metadata__"].update({"job.settings_digest": "12ab"}))}),
        # -- finding 10: inputs that are not regular files
        Case("--config /dev/zero", ["--config", "/dev/zero"],
             ["/dev/zero", "character device", "expected a TOML file"], with_config_flag=False),
        Case("--config /dev/urandom", ["--config", "/dev/urandom"],
             ["/dev/urandom", "character device"], with_config_flag=False),
        Case("--config FIFO", ["--config", "c.fifo"], ["c.fifo", "FIFO"],
             with_config_flag=False, files={"c.fifo": "FIFO"}),
        Case("--config /proc/self/mem", ["--config", "/proc/self/mem"],
             ["/proc/self/mem", "read failed"], with_config_flag=False),
        Case("dataset_path /dev/zero", ["--training.dataset_path", "/dev/zero"],
             ["training.dataset_path", "/dev/zero", "character device"]),
        Case("dataset_path FIFO", ["--training.dataset_path", "d.fifo"],
             ["training.dataset_path", "d.fifo", "FIFO"], files={"d.fifo": "FIFO"}),
        Case("dataset_path .npy FIFO", ["--training.dataset_path", "d.npy"],
             ["d.npy", "not a regular file"], files={"d.npy": "FIFO"}),
        Case("checkpoint.load /dev/zero", ["--checkpoint.load", "/dev/zero"],
             ["/dev/zero", "not a regular file"]),
        Case("checkpoint.initial_load_path /dev/zero", ["--checkpoint.initial_load_path", "/dev/zero"],
             ["/dev/zero", "not a regular file"]),
        Case("checkpoint.initial_load_path FIFO", ["--checkpoint.initial_load_path", "w.fifo"],
             ["w.fifo", "not a regular file"], files={"w.fifo": "FIFO"}),
        Case("checkpoint.initial_load_path missing", ["--checkpoint.initial_load_path", "gone.st"],
             ["gone.st", "no such file"]),
        Case("checkpoint.exclude_from_loading not a list", [],
             ["checkpoint.exclude_from_loading", "expected"],
             config=config_text().replace("[checkpoint]\n",
                                          "[checkpoint]\nexclude_from_loading = 7\n")),
        # -- finding 12 and durable checkpoints: layout and checksums
        Case("checkpoint with overlapping tensors",
             ["--checkpoint.load", "o.safetensors", "--model.dim", "128"],
             ["o.safetensors", "overlaps"], files={"o.safetensors": with_overlap}),
        Case("checkpoint tensor relabelled BF16: its bytes are 4 per element, BF16 has 2",
             ["--checkpoint.load", "h.safetensors", "--model.dim", "128"],
             ["h.safetensors", "norm.weight", "of BF16 needs"],
             files={"h.safetensors": lambda seed: with_header(
                 seed, lambda h: h["norm.weight"].update(dtype="BF16"))}),
        Case("checkpoint tensor of dtype F64: named, with the three dtypes read",
             ["--checkpoint.load", "d.safetensors", "--model.dim", "128"],
             ["d.safetensors", "norm.weight", '"F64" is not supported', '"F32"', '"BF16"',
              '"F16"'],
             files={"d.safetensors": lambda seed: with_header(
                 seed, lambda h: h["norm.weight"].update(dtype="F64"))}),
        Case("checkpoint with a flipped byte",
             ["--checkpoint.load", "f.safetensors", "--model.dim", "128"],
             ["f.safetensors", "checksum", "corrupt"], files={"f.safetensors": with_flipped_byte}),
        # -- a hostile-input sweep (2026-12-07): the metrics file of an earlier
        # run was truncated by runs whose output folders passed the checks
        # but could not be made; those folders are now made before it opens.
        Case("profile traces folder under /proc (checks pass, mkdir fails)",
             ["--profiling.enable_profiling", "true", "--profiling.profile_freq", "1",
              "--profiling.save_traces_folder", "/proc/remat-no-such"],
             ["profiling.save_traces_folder", "/proc/remat-no-such", "expected"]),
        Case("memory snapshot folder under /proc",
             ["--profiling.enable_memory_snapshot", "true",
              "--profiling.save_memory_snapshot_folder", "/proc/remat-no-such"],
             ["profiling.save_memory_snapshot_folder", "/proc/remat-no-such", "expected"]),
        Case("profile traces folder: new/../a file/sub", [
            "--profiling.enable_profiling", "true", "--profiling.profile_freq", "1",
            "--profiling.save_traces_folder", "new/../blocker/sub"],
             ["profiling.save_traces_folder", "is a regular file, expected a folder"],
             files={"outputs/blocker": "x"}),
        Case("metrics path a trace takes, spelled with /./ (a trace replaced it, exit 0)",
             ["--profiling.enable_profiling", "true", "--profiling.profile_freq", "1",
              "--profiling.save_traces_folder", "traces", "--metrics.jsonl_path",
              "outputs/traces/iteration_1/./rank0_trace.json"],
             ["metrics.jsonl_path", "a name the profile traces", "expected another file name"]),
        Case("lr_min 1.5 (a fraction of the lr: the decay would rise)",
             ["--lr_scheduler.lr_min", "1.5"], ["lr_scheduler.lr_min", "1.5", "in [0, 1]"]),
        Case("llama4 n_heads -3 (was read as the flavor's)",
             ["--model.name", "llama4", "--model.n_heads", "-3"],
             ["model.n_heads = -3", "expected a positive integer"]),
        Case("llama4 multiple_of -2^63", ["--model.name", "llama4", "--model.multiple_of",
                                          "-9223372036854775808"],
             ["model.multiple_of", "expected a positive integer"]),
        Case("a subnormal eps in the config file (the command line refused it already)", [],
             ["optimizer.eps", "config.toml", "finite and 0 or between 2.2e-308 and 1.8e308"],
             config=config_text().replace("eps = 1e-8", "eps = 1e-320")),
        Case("lr in hexadecimal (no TOML number)", ["--optimizer.lr", "0x1p3"],
             ["optimizer.lr", "0x1p3", "written in decimal"]),
        Case("vocab_size 257 under the byte tokenizer: the model's fault, not the dataset's",
             ["--model.vocab_size", "257"], ["expected model.vocab_size >= 258"],
             regexes=[r"(?m)^error: model\.vocab_size = 257: .*\(model\.tokenizer_path\)$"]),
        Case(".npy shape (1000) is a number, not a tuple", ["--training.dataset_path", "d.npy"],
             ["d.npy", "malformed header"],
             files={"d.npy": npy_bytes(GOOD_TOKENS).replace(b"(1000,)", b"(1000) ")}),
        Case("unknown command names all seven", [], ["unknown command 'fly'",
                                                    "generate, tokenizer or checkpoint"],
             command="fly"),
        Case("plan: empty --timeline-compare", ["--timeline", "t.svg", "--timeline-compare", ""],
             ["--timeline-compare", "expected an AC mode"], command="plan"),
    ]


def main():
    seed = make_seed_checkpoint()
    failures = 0
    for case in cases():
        # A truncated copy of the seed checkpoint: the header and a little of the data.
        for rel, data in list(case.files.items()):
            if data == "SEED-CUT":
                case.files[rel] = seed[: len(seed) // 3]
        if case.command is None:
            # No command: remat with nothing but the file-location flags would see
            # "--job.dump_folder" as the command; run it bare instead.
            problems, message = run_bare(case)
        else:
            problems, message = run_case(case, seed)
        status = "ok  " if not problems else "FAIL"
        failures += bool(problems)
        detail = f" [{'; '.join(problems)}]" if problems else ""
        print(f"{status} {case.name}: {message}{detail}", flush=True)
    print(f"{failures} failing case(s)" if failures else "all cases ok")
    return 1 if failures else 0


def run_bare(case):
    """`remat` with no arguments at all, in a temp dir holding earlier output."""
    with tempfile.TemporaryDirectory(prefix="remat-bad-") as tmp:
        tmp = Path(tmp)
        write(tmp / "outputs" / "checkpoint" / "step-1.safetensors", OLD_CHECKPOINT)
        before = snapshot(tmp)
        proc = subprocess.run([REMAT], cwd=tmp, capture_output=True, text=True,
                              timeout=TIMEOUT_S, errors="replace")
        problems = []
        if proc.returncode != 2:
            problems.append(f"exit status {proc.returncode}, expected 2")
        for s in case.expect:
            if s not in proc.stderr:
                problems.append(f"stderr lacks {s!r}")
        for s in FORBIDDEN:
            if s in proc.stdout or s in proc.stderr:
                problems.append(f"output contains {s!r}")
        if snapshot(tmp) != before:
            problems.append("files changed")
        return problems, " | ".join(proc.stderr.strip().splitlines()[:1]) or "(no stderr)"


if __name__ == "__main__":
    sys.exit(main())
