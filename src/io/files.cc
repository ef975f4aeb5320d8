#include "io/files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/progress.h"

namespace remat {

namespace {

namespace fs = std::filesystem;

std::string in_quotes(const std::string& path) { return "'" + path + "'"; }

// "a regular file", "a directory", "a character device", ...: what stands
// at a path (for a message that says why it is not the kind expected there).
std::string kind_of(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  return "neither a file nor a folder";
}

std::string parent_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

// The first existing path among `folder` and its ancestors (stat follows
// links, so a symlinked output folder counts as the folder it points to).
// The path is resolved first as creating its folders will resolve it: in
// "new/../file/sub", "new" is made and ".." leaves it again, so what must
// be a folder is "file", which walking up "new/../file/sub" as written
// would never look at.
std::string nearest_existing(std::string folder) {
  std::error_code ec;
  const fs::path resolved = fs::weakly_canonical(folder, ec);
  if (!ec && !resolved.empty()) folder = resolved.string();
  struct stat st;
  while (::stat(folder.c_str(), &st) != 0) {
    // ENOTDIR: a file stands where a folder should; walking up finds it.
    if (errno != ENOENT && errno != ENOTDIR) break;
    const std::string up = parent_of(folder);
    if (up == folder) break;
    folder = up;
  }
  return folder;
}

// `folder` exists (or its nearest existing ancestor does) as a folder this
// process may create files in.
void check_writable_folder(const std::string& folder, const std::string& key,
                           const std::string& for_what) {
  const std::string existing = nearest_existing(folder);
  const std::string prefix = key + ": cannot write " + for_what + ": ";
  struct stat st;
  if (::stat(existing.c_str(), &st) != 0)
    throw InputError(prefix + in_quotes(existing) + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode))
    throw InputError(prefix + in_quotes(existing) + " is " + kind_of(st.st_mode) +
                     ", expected a folder");
  if (::access(existing.c_str(), W_OK | X_OK) != 0)
    throw InputError(prefix + "folder " + in_quotes(existing) + " is not writable (" +
                     std::strerror(errno) + ")");
}

// The files read while a ProtectedInputs scope is open, by identity;
// `scopes` counts the open ones.
struct InputFile {
  dev_t device;
  ino_t inode;
  std::string path, what;
  bool rewritten;  // InputUse::kRewritten: its writer (key `what`) may replace it
};
std::mutex inputs_mutex;
int scopes = 0;
std::vector<InputFile>& inputs() {
  static std::vector<InputFile> files;
  return files;
}

void note_input_identity(const struct stat& st, const std::string& path, const std::string& what,
                         InputUse use) {
  const std::lock_guard<std::mutex> lock(inputs_mutex);
  if (scopes == 0) return;
  for (const InputFile& f : inputs())
    if (f.device == st.st_dev && f.inode == st.st_ino && f.path == path) return;
  inputs().push_back({st.st_dev, st.st_ino, path, what, use == InputUse::kRewritten});
}

// The input `st` is, if any, that a writer under `key` may not replace. An
// input counts while its own path still names it: once deleted, its inode
// number may be reused by an unrelated new file.
std::optional<InputFile> input_with_identity(const struct stat& st, const std::string& key) {
  const std::lock_guard<std::mutex> lock(inputs_mutex);
  for (const InputFile& f : inputs()) {
    if (f.rewritten && f.what == key) continue;  // its own writer
    struct stat now;
    if (f.device == st.st_dev && f.inode == st.st_ino && ::stat(f.path.c_str(), &now) == 0 &&
        now.st_dev == f.device && now.st_ino == f.inode)
      return f;
  }
  return std::nullopt;
}

// A path that exists must be a regular file, not a link to one: a rename
// over it would replace the link, or a device such as /dev/null. Nor may it
// be a file this run reads (InputUse).
void check_replaceable(const std::string& path, const std::string& key) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return;  // absent: fine
  if (const std::optional<InputFile> input = input_with_identity(st, key)) {
    const std::string same =
        input->path == path ? "" : " (the same file as " + in_quotes(input->path) + ")";
    throw InputError(key + ": " + in_quotes(path) + " is the " + input->what + " this run reads" +
                     same + "; writing it would destroy it (expected another file name)");
  }
  if (S_ISREG(st.st_mode)) return;
  std::string why = S_ISLNK(st.st_mode)
                        ? "; remat does not write through links (give the link's target instead)"
                        : "";
  throw InputError(key + ": " + in_quotes(path) + " exists and is " + kind_of(st.st_mode) +
                   ", expected a regular file or a new file name" + why);
}

void fsync_folder(const std::string& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: the rename itself has happened
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

std::string read_regular_file(const std::string& path, const std::string& what,
                              const std::string& expected, int64_t max_bytes, InputUse use) {
  const std::string prefix = "cannot read " + what + " " + in_quotes(path) + ": ";
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) throw InputError(prefix + "no such file");
    throw InputError(prefix + std::strerror(errno));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string kind = S_ISDIR(st.st_mode) ? "a directory" : kind_of(st.st_mode);
    ::close(fd);
    throw InputError(prefix + "is " + kind + ", expected " + expected);
  }
  note_input_identity(st, path, what, use);
  std::string text;
  char buffer[1 << 16];
  Progress progress("reading " + path, static_cast<int64_t>(st.st_size), ProgressUnit::kBytes);
  while (true) {
    progress.update(static_cast<int64_t>(text.size()));
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      throw InputError(prefix + "read failed: " + std::strerror(error));
    }
    if (n == 0) break;
    if (static_cast<int64_t>(text.size()) + n > max_bytes) {
      ::close(fd);
      throw InputError(prefix + "larger than " + std::to_string(max_bytes) +
                       " bytes, the most remat reads for " + what + " (expected " + expected + ")");
    }
    text.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

ProtectedInputs::ProtectedInputs() {
  const std::lock_guard<std::mutex> lock(inputs_mutex);
  ++scopes;
}

ProtectedInputs::~ProtectedInputs() {
  const std::lock_guard<std::mutex> lock(inputs_mutex);
  if (--scopes == 0) inputs().clear();
}

void note_input(const std::string& path, const std::string& what, InputUse use) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode))
    note_input_identity(st, path, what, use);
}

void check_output_file(const std::string& path, const std::string& key) {
  if (path.empty()) throw InputError(key + ": empty path, expected a file name");
  if (path.back() == '/')
    throw InputError(key + ": " + in_quotes(path) + " names a folder, expected a file");
  check_replaceable(path, key);
  check_replaceable(path + ".tmp", key);
  check_writable_folder(parent_of(path), key, in_quotes(path));
}

bool same_place(const std::string& a, const std::string& b) {
  std::error_code ec_a, ec_b;
  const fs::path pa = fs::weakly_canonical(fs::absolute(a, ec_a), ec_a);
  const fs::path pb = fs::weakly_canonical(fs::absolute(b, ec_b), ec_b);
  if (!ec_a && !ec_b && pa == pb) return true;
  struct stat sa, sb;
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

void check_output_folder(const std::string& folder, const std::string& key) {
  struct stat st;
  if (::stat(folder.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
    throw InputError(key + ": " + in_quotes(folder) + " is " + kind_of(st.st_mode) +
                     ", expected a folder");
  check_writable_folder(folder, key, "into " + in_quotes(folder));
}

void create_folders(const std::string& folder, const std::string& key) {
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec)
    throw InputError(key + ": cannot create folder " + in_quotes(folder) + ": " + ec.message() +
                     " (expected an existing writable folder or one that can be created)");
}

namespace {

// The temporaries of the AtomicFiles open now, so that a SIGINT, SIGTERM or
// SIGHUP that would end the process (its default action) first removes
// them: `remat checkpoint convert` or `grads` stopped mid-write left a
// partial file as large as a checkpoint beside the output. Fixed slots, as
// the handler may neither allocate nor lock; a temporary that finds no slot
// (more than 16 open at once, or a path past PATH_MAX) is left as before.
struct TemporarySlot {
  std::atomic<bool> taken{false};  // claimed by a writer
  std::atomic<bool> ready{false};  // `path` holds a temporary to remove
  char path[PATH_MAX];
};
constexpr int kTemporarySlots = 16;
TemporarySlot g_temporaries[kTemporarySlots];

void write_stderr(const char* text) {
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, text, std::strlen(text));
}

// Async-signal-safe: unlink, write and raise only.
void remove_temporaries_then_die(int signal) {
  const int saved_errno = errno;
  for (TemporarySlot& slot : g_temporaries) {
    if (!slot.ready.load() || ::unlink(slot.path) != 0) continue;
    write_stderr("remat: interrupted by ");
    write_stderr(signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "SIGHUP");
    write_stderr(": removed the unfinished ");
    write_stderr(slot.path);
    write_stderr("\n");
  }
  errno = saved_errno;
  // SA_RESETHAND restored the default action: once this returns, the
  // signal ends the process as it would have (a shell sees 128 + N).
  ::raise(signal);
}

// Where a signal still has its default action (not train's stop handling,
// train/stop_signal.h, nor MPI's), a temporary is removed before it acts.
void remove_temporaries_on_fatal_signals() {
  for (const int signal : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction current {};
    if (::sigaction(signal, nullptr, &current) != 0 || (current.sa_flags & SA_SIGINFO) ||
        current.sa_handler != SIG_DFL)
      continue;
    struct sigaction action {};
    action.sa_handler = remove_temporaries_then_die;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND | SA_RESTART;
    ::sigaction(signal, &action, nullptr);
  }
}

int register_temporary(const std::string& tmp) {
  if (tmp.size() >= PATH_MAX) return -1;
  for (int i = 0; i < kTemporarySlots; ++i) {
    bool free = false;
    if (!g_temporaries[i].taken.compare_exchange_strong(free, true)) continue;
    std::memcpy(g_temporaries[i].path, tmp.c_str(), tmp.size() + 1);
    g_temporaries[i].ready.store(true);
    remove_temporaries_on_fatal_signals();
    return i;
  }
  return -1;
}

// After the temporary is renamed or removed: a signal between the two finds
// no file to remove.
void release_temporary(int slot) {
  if (slot < 0) return;
  g_temporaries[slot].ready.store(false);
  g_temporaries[slot].taken.store(false);
}

}  // namespace

AtomicFile::AtomicFile(const std::string& path, const std::string& key, bool make_folders,
                       const std::string& tag)
    : path_(path), tmp_(path + (tag.empty() ? "" : "." + tag) + ".tmp"), key_(key) {
  check_replaceable(path_, key_);
  check_replaceable(tmp_, key_);
  if (make_folders) create_folders(parent_of(path_), key_);
  // O_EXCL | O_NOFOLLOW: never write through something planted at the name.
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  fd_ = ::open(tmp_.c_str(), kFlags, 0644);
  if (fd_ < 0 && errno == EEXIST) {
    // A file already there is left alone: a user's report.tmp, or what an
    // interrupted write left (the checkpoint folder's own are removed at
    // start-up, train/checkpoint_folder.h). This write takes a name of its own.
    tmp_ = tmp_.substr(0, tmp_.size() - 4) + "." + std::to_string(::getpid()) + ".tmp";
    fd_ = ::open(tmp_.c_str(), kFlags, 0644);
  }
  if (fd_ < 0) {
    const int error = errno;
    // Named by the file the user asked for; the temporary only as the
    // detail, since it is what the system refused.
    // ENOENT also comes from folders that take no new files (/proc/self/fd):
    // the folder is said to be missing only where it is.
    std::error_code ec;
    if (error == ENOENT && !fs::is_directory(parent_of(path_), ec))
      throw InputError(key_ + ": cannot create " + in_quotes(path_) + ": its folder " +
                       in_quotes(parent_of(path_)) +
                       " does not exist; expected a path in an existing folder");
    throw InputError(key_ + ": cannot create " + in_quotes(path_) + " (written first as " +
                     in_quotes(tmp_) + "): " + std::strerror(error));
  }
  slot_ = register_temporary(tmp_);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
  release_temporary(std::exchange(slot_, -1));
}

void AtomicFile::fail(const std::string& what, bool target_at_fault) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  release_temporary(std::exchange(slot_, -1));
  committed_ = true;  // nothing left to clean up
  const std::string message = key_ + ": cannot write " + in_quotes(path_) + ": " + what;
  if (target_at_fault) throw InputError(message);
  throw OutputError(message + "; " + in_quotes(path_) + " is untouched");
}

namespace {

// strerror, naming the cause where the system's words are terse.
std::string write_error(int error) {
  std::string text = std::strerror(error);
  if (error == ENOSPC) text += " (disk full)";
  if (error == EFBIG) text += " (beyond the file-size limit, ulimit -f)";
  return text;
}

}  // namespace

void AtomicFile::write(const void* data, int64_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    // Linux writes at most about 2 GiB per call.
    const size_t chunk = static_cast<size_t>(std::min<int64_t>(bytes, int64_t{1} << 30));
    const ssize_t n = ::write(fd_, p, chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(write_error(errno));
    p += n;
    bytes -= n;
  }
}

void AtomicFile::commit() {
  // The data must be on disk before the rename makes it the real file.
  if (::fsync(fd_) != 0) fail("fsync failed: " + write_error(errno));
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) fail("close failed: " + write_error(errno));
  // Checked again right before the rename: the target may have changed
  // since the start-up check (a link or device put there meanwhile).
  struct stat st;
  if (::lstat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    fail("it became " + kind_of(st.st_mode) + ", expected a regular file", true);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0)
    fail(std::string("rename from ") + in_quotes(tmp_) + " failed: " + write_error(errno));
  committed_ = true;
  release_temporary(std::exchange(slot_, -1));
  fsync_folder(parent_of(path_));  // makes the rename itself durable
}

bool remove_stale_temporary(const std::string& path) {
  const std::string tmp = path + ".tmp";
  struct stat st;
  if (::lstat(tmp.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  return ::unlink(tmp.c_str()) == 0;
}

LineLog::LineLog(const std::string& path, const std::string& key, bool append) : path_(path) {
  check_replaceable(path, key);
  create_folders(parent_of(path), key);
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
               0644);
  if (fd_ < 0)
    throw InputError(key + ": cannot open " + in_quotes(path) + ": " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw InputError(key + ": " + in_quotes(path) + " is not a regular file");
  }
  // One writer per log: a second run given the same path would truncate the
  // first one's lines and then interleave its own with them. The flock is
  // held while the file is open (a file system without flock goes unlocked).
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    ::close(fd_);
    fd_ = -1;
    throw InputError(key + ": " + in_quotes(path) +
                     " is being written by another remat run; expected a file no running "
                     "job logs to (wait for that run to end, or name another file)");
  }
  if (!append && ::ftruncate(fd_, 0) != 0) {
    ::close(fd_);
    fd_ = -1;
    throw InputError(key + ": cannot truncate " + in_quotes(path) + ": " + std::strerror(errno));
  }
}

LineLog::~LineLog() {
  if (fd_ >= 0) ::close(fd_);
}

LineLog::LineLog(LineLog&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

LineLog& LineLog::operator=(LineLog&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void LineLog::write_line(const std::string& line) { append(line + "\n", "line"); }

void LineLog::write_entry(const std::string& bytes) { append(bytes, "entry"); }

void LineLog::append(const std::string& text, const char* unit) {
  struct stat st;
  const off_t end = ::fstat(fd_, &st) == 0 ? st.st_size : -1;
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why =
          "cannot append to " + in_quotes(path_) + ": " + write_error(errno) + "; it ends with ";
      const std::string whole = std::string("its last whole ") + unit;
      if (done == 0) throw OutputError(why + whole);
      // Part of it is in, and a reader would meet half a JSON line (or record).
      if (end >= 0 && ::ftruncate(fd_, end) == 0)
        throw OutputError(why + whole + " (the part written was cut off)");
      throw OutputError(why + "a" + (unit[0] == 'e' ? "n " : " ") + unit + " cut short");
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace remat
