// The one place remat opens files: inputs are read only from regular files,
// outputs are written only by creating a temporary beside them and renaming
// it into place, durably.
//
// Why: a path a user gives may name a device (/dev/zero reads forever,
// /dev/null must never be replaced), a FIFO (blocks forever), a directory or
// a symbolic link. Every such case is an InputError (exit 2) naming the path
// and the config key, raised before anything is written.
//
// Symbolic links: an output whose last path component is a symbolic link is
// refused (renaming over it would replace the link, not what it points to);
// links among the parent folders are followed as usual.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace remat {

// How a run uses a file it reads. While a ProtectedInputs scope is open, an
// input is never written: every output check below (check_output_file,
// AtomicFile, LineLog) refuses a path that is, or whose temporary is, a file
// read in the scope, however it is spelled (the same device and inode), so
// `--metrics.jsonl_path` naming the config file, or `tokenizer train
// --output` naming its `--input`, fails with exit 2 instead of destroying
// it. kRewritten: a file the run reads and then replaces on purpose (a
// cache): protected the same way from every output but its own writer, the
// one whose key is the `what` it was read (or noted) under.
enum class InputUse { kInput, kRewritten };

// The span of one command (the CLI opens one around each): the inputs read
// while it is open are protected, and forgotten when it closes. Scopes nest;
// the outermost one holds the record. Without one nothing is recorded, so a
// process that runs many jobs (tests) may write a file an earlier job read.
class ProtectedInputs {
 public:
  ProtectedInputs();
  ~ProtectedInputs();
  ProtectedInputs(const ProtectedInputs&) = delete;
  ProtectedInputs& operator=(const ProtectedInputs&) = delete;
};

// The whole content of a regular file, at most `max_bytes` long. `what`
// names the file for messages ("config file"), `expected` says what it
// should be ("a TOML file"). Devices, FIFOs, sockets, directories, read
// errors and larger files are InputError. Opening never blocks (a FIFO is
// detected, not waited on).
std::string read_regular_file(const std::string& path, const std::string& what,
                              const std::string& expected, int64_t max_bytes,
                              InputUse use = InputUse::kInput);

// Records `path` (an existing file) as an input, for readers that open files
// themselves (.npy, .safetensors), or a rewritten file after its writer
// replaced it (the new file is another inode). `what` names it for messages.
void note_input(const std::string& path, const std::string& what, InputUse use = InputUse::kInput);

// Checks, without creating anything, that `path` can later be written by
// AtomicFile: it is absent or a regular file (not a link, device, FIFO or
// directory), and its nearest existing ancestor folder is a writable folder
// (missing folders will be created). InputError names `key`.
void check_output_file(const std::string& path, const std::string& key);

// Whether `a` and `b` name the same file: the same path once made absolute
// and resolved (links, "..", folders yet to be created), or, both existing,
// the same inode (a hard link).
bool same_place(const std::string& a, const std::string& b);

// Checks that `folder` is a writable folder or can be created as one.
void check_output_folder(const std::string& folder, const std::string& key);

// Creates the missing folders of `folder` (InputError naming `key` on failure).
void create_folders(const std::string& folder, const std::string& key);

// Writes `path` atomically and durably: the bytes go to `path + ".tmp"`
// (created exclusively and never through a link; where a file already has
// that name, it is left alone and `path + ".<pid>.tmp"` is used), which is
// fsync'ed, renamed over
// `path` and its folder fsync'ed, so after a crash `path` holds either the
// old or the new content, never a mix. Any failure removes the temporary:
// a target that cannot be created or is not a regular file throws
// InputError, a write, fsync or rename the system refuses (disk full, a
// file-size limit) OutputError. A SIGINT, SIGTERM or SIGHUP that would
// end the process (one left at its default action) first removes the
// temporaries open then, and names each on stderr.
class AtomicFile {
 public:
  // Opens the temporary; `key` names the config key or flag for messages.
  // With `make_folders`, missing parent folders are created first. A
  // non-empty `tag` names the temporary `path + "." + tag + ".tmp"` instead,
  // for a second writer of the same content that must not remove or reuse
  // the first one's temporary (a checkpoint snapshot, train/stop_snapshot.h).
  AtomicFile(const std::string& path, const std::string& key, bool make_folders = false,
             const std::string& tag = "");
  ~AtomicFile();  // removes the temporary unless commit() succeeded
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, int64_t bytes);
  void commit();  // fsync, rename, fsync the folder

 private:
  // Removes the temporary and throws: InputError where the target is at
  // fault, else OutputError.
  [[noreturn]] void fail(const std::string& what, bool target_at_fault = false);
  std::string path_, tmp_, key_;
  int fd_ = -1;
  int slot_ = -1;  // where a fatal signal finds the temporary to remove (files.cc)
  bool committed_ = false;
};

// Removes `path + ".tmp"` if it is a regular file: what a save killed before
// its rename leaves. Returns true if one was removed.
bool remove_stale_temporary(const std::string& path);

// An append-only file for per-step logs (metrics JSONL, TensorBoard events): opened once
// (missing folders created; truncated, or appended to when `append`), by one
// writer at a time (an flock: InputError while another process, or another
// LineLog, holds the file open), each line written with one
// write(2) so a killed run keeps every complete line it logged. A line the
// system refuses part of (disk full) is cut off again, so the file ends
// with its last whole line, and OutputError thrown.
class LineLog {
 public:
  LineLog() = default;
  LineLog(const std::string& path, const std::string& key, bool append);
  ~LineLog();
  LineLog(LineLog&& other) noexcept;
  LineLog& operator=(LineLog&& other) noexcept;
  bool is_open() const { return fd_ >= 0; }
  void write_line(const std::string& line);  // appends line + '\n'
  // Appends `bytes`, one entry of a binary log (a TensorBoard record, or a
  // step's records: io/tensorboard.h), as write_line appends a line: with
  // one write(2), cut off again where the system took part of it.
  void write_entry(const std::string& bytes);

 private:
  void append(const std::string& text, const char* unit);  // unit: "line" or "entry"
  std::string path_;
  int fd_ = -1;
};

}  // namespace remat
