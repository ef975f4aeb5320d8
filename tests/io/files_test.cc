// Inputs are read only from regular files; outputs never replace or write
// through links, devices, FIFOs or folders; atomic writes leave no
// temporary behind.
#include "io/files.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"

namespace remat {
namespace {

namespace fs = std::filesystem;

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("remat_files_test_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
    return path(name);
  }
  std::string fifo(const std::string& name) const {
    EXPECT_EQ(::mkfifo(path(name).c_str(), 0644), 0);
    return path(name);
  }
  static std::string read(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
  fs::path dir_;
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST_F(FilesTest, ReadsRegularFilesOnly) {
  EXPECT_EQ(read_regular_file(write("a.toml", "x = 1\n"), "config file", "a TOML file", 100),
            "x = 1\n");
  std::string e =
      error_of([] { read_regular_file("/dev/zero", "config file", "a TOML file", 100); });
  EXPECT_NE(e.find("'/dev/zero': is a character device, expected a TOML file"), std::string::npos)
      << e;
  // A FIFO without a writer: refused at once, not waited on.
  const std::string f = fifo("pipe");
  e = error_of([&] { read_regular_file(f, "dataset file", "a text file", 100); });
  EXPECT_NE(e.find("FIFO"), std::string::npos) << e;
  e = error_of([&] { read_regular_file(dir_.string(), "config file", "a TOML file", 100); });
  EXPECT_NE(e.find("is a directory, expected a TOML file"), std::string::npos) << e;
  e = error_of([&] { read_regular_file(path("none"), "config file", "a TOML file", 100); });
  EXPECT_NE(e.find("no such file"), std::string::npos) << e;
  e = error_of([&] {
    read_regular_file(write("big", std::string(101, 'x')), "config file", "a TOML file", 100);
  });
  EXPECT_NE(e.find("larger than 100 bytes"), std::string::npos) << e;
  // /proc/self/mem is "regular" but unreadable at offset 0: an error, not ignored.
  e = error_of([] { read_regular_file("/proc/self/mem", "config file", "a TOML file", 100); });
  EXPECT_NE(e.find("read failed"), std::string::npos) << e;
}

TEST_F(FilesTest, OutputChecksRefuseLinksDevicesFifosAndFolders) {
  EXPECT_EQ(error_of([&] { check_output_file(path("new.jsonl"), "metrics.jsonl_path"); }), "");
  EXPECT_EQ(error_of([&] { check_output_file(path("sub/dir/new.jsonl"), "k"); }), "");
  EXPECT_EQ(error_of([&] { check_output_file(write("old.jsonl", "x"), "k"); }), "");
  std::string e = error_of([] { check_output_file("/dev/null", "metrics.jsonl_path"); });
  EXPECT_NE(e.find("metrics.jsonl_path: '/dev/null' exists and is a character device"),
            std::string::npos)
      << e;
  const std::string f = fifo("pipe");
  EXPECT_NE(error_of([&] { check_output_file(f, "k"); }).find("FIFO"), std::string::npos);
  EXPECT_NE(error_of([&] { check_output_file(dir_.string(), "k"); }).find("a directory"),
            std::string::npos);
  fs::create_symlink(write("target", "keep"), path("link"));
  e = error_of([&] { check_output_file(path("link"), "k"); });
  EXPECT_NE(e.find("symbolic link"), std::string::npos) << e;
  // A regular file where a folder should be.
  e = error_of([&] { check_output_file(write("blocker", "") + "/sub/m.jsonl", "k"); });
  EXPECT_NE(e.find("expected a folder"), std::string::npos) << e;
  EXPECT_NE(e.find("is a regular file, expected a folder"), std::string::npos) << e;
  e = error_of([&] { check_output_folder(path("blocker"), "job.dump_folder"); });
  EXPECT_NE(e.find("job.dump_folder"), std::string::npos) << e;
  EXPECT_NE(e.find("is a regular file, expected a folder"), std::string::npos) << e;
  EXPECT_EQ(error_of([&] { check_output_folder(path("not/yet"), "k"); }), "");
  EXPECT_FALSE(fs::exists(path("not")));  // checking creates nothing
}

// "new/../blocker/sub": "new" would be created and ".." leave it, so the
// regular file "blocker" is where a folder must go; walking up the path as
// written never looked at it (the run failed at its first profile trace).
TEST_F(FilesTest, OutputChecksResolveDotDotThroughFoldersYetToBeCreated) {
  write("blocker", "");
  std::string e = error_of([&] { check_output_folder(path("new/../blocker/sub"), "k"); });
  EXPECT_NE(e.find("is a regular file, expected a folder"), std::string::npos) << e;
  e = error_of([&] { check_output_file(path("new/../blocker/m.jsonl"), "k"); });
  EXPECT_NE(e.find("is a regular file, expected a folder"), std::string::npos) << e;
  EXPECT_EQ(error_of([&] { check_output_folder(path("new/../fine/sub"), "k"); }), "");
  EXPECT_FALSE(fs::exists(path("new")));
}

// A second writer of one log (another run given the same metrics path) is
// refused before it truncates the first one's lines.
TEST_F(FilesTest, OneLineLogWriterAtATime) {
  const std::string p = path("m.jsonl");
  std::string e;
  {
    LineLog first(p, "metrics.jsonl_path", /*append=*/false);
    first.write_line("{\"step\": 1}");
    e = error_of([&] { LineLog second(p, "metrics.jsonl_path", /*append=*/false); });
    first.write_line("{\"step\": 2}");
  }
  EXPECT_NE(e.find("metrics.jsonl_path: '" + p + "' is being written by another remat run"),
            std::string::npos)
      << e;
  EXPECT_EQ(read(p), "{\"step\": 1}\n{\"step\": 2}\n");
  // Once the first is closed, the file is free again.
  EXPECT_EQ(error_of([&] { LineLog again(p, "metrics.jsonl_path", /*append=*/true); }), "");
}

TEST_F(FilesTest, UnwritableFolderIsFoundByTheCheck) {
  if (::geteuid() == 0) GTEST_SKIP() << "root may write to any folder";
  fs::create_directories(path("ro"));
  fs::permissions(path("ro"), fs::perms::owner_read | fs::perms::owner_exec);
  const std::string e =
      error_of([&] { check_output_folder(path("ro/ckpt"), "checkpoint.folder"); });
  fs::permissions(path("ro"), fs::perms::owner_all);
  EXPECT_NE(e.find("not writable"), std::string::npos) << e;
}

TEST_F(FilesTest, AtomicFileReplacesARegularFileAndLeavesNoTemporary) {
  const std::string p = write("out.bin", "old");
  {
    AtomicFile f(p, "k");
    f.write("new", 3);
    f.commit();
  }
  EXPECT_EQ(read(p), "new");
  EXPECT_FALSE(fs::exists(p + ".tmp"));
  {
    AtomicFile f(p, "k");
    f.write("abandoned", 9);
  }  // not committed: the old content stays, the temporary goes
  EXPECT_EQ(read(p), "new");
  EXPECT_FALSE(fs::exists(p + ".tmp"));
}

// A signal that ends the process mid-write (Ctrl-C on `checkpoint convert`)
// takes the temporary with it; the old file keeps its bytes. In a child
// process (a death test), where the signals have their default action.
TEST_F(FilesTest, AFatalSignalMidWriteRemovesTheTemporary) {
  for (const int signal : {SIGINT, SIGTERM}) {
    const std::string p = write("out.bin", "old");
    EXPECT_EXIT(
        {
          AtomicFile f(p, "k");
          f.write("partial", 7);
          std::raise(signal);
        },
        ::testing::KilledBySignal(signal), "removed the unfinished .*out\\.bin\\.tmp");
    EXPECT_FALSE(fs::exists(p + ".tmp"));
    EXPECT_EQ(read(p), "old");
  }
  // A committed file is not removed by a later signal.
  const std::string q = path("done.bin");
  EXPECT_EXIT(
      {
        {
          AtomicFile f(q, "k");
          f.write("whole", 5);
          f.commit();
        }
        AtomicFile g(path("other.bin"), "k");
        std::raise(SIGTERM);
      },
      ::testing::KilledBySignal(SIGTERM), "removed the unfinished .*other\\.bin\\.tmp");
  EXPECT_EQ(read(q), "whole");
  EXPECT_FALSE(fs::exists(path("other.bin.tmp")));
}

// A file at the temporary's name may be the user's (report.tmp beside
// report): it keeps its bytes, and the write takes a name of its own.
TEST_F(FilesTest, AtomicFileLeavesAFileAtItsTemporaryNameAndNeverWritesThroughALink) {
  const std::string p = path("ckpt");
  write("ckpt.tmp", std::string(1000, 'x'));
  {
    AtomicFile f(p, "k");
    EXPECT_TRUE(fs::exists(p + "." + std::to_string(::getpid()) + ".tmp"));
    f.write("ok", 2);
    f.commit();
  }
  EXPECT_EQ(read(p), "ok");
  EXPECT_EQ(read(p + ".tmp"), std::string(1000, 'x'));
  EXPECT_FALSE(fs::exists(p + "." + std::to_string(::getpid()) + ".tmp"));
  fs::remove(p + ".tmp");
  // A link planted at the temporary's name: refused, its target untouched.
  const std::string victim = write("victim", "precious");
  fs::create_symlink(victim, p + ".tmp");
  EXPECT_NE(error_of([&] { AtomicFile f(p, "k"); }).find("symbolic link"), std::string::npos);
  EXPECT_EQ(read(victim), "precious");
  EXPECT_TRUE(fs::is_symlink(p + ".tmp"));
}

// Two writers of the same file (a rank's save and its snapshot's child):
// each under its own temporary name, neither removing the other's.
TEST_F(FilesTest, AtomicFileWithATagLeavesTheOtherWritersTemporary) {
  const std::string p = path("shard");
  AtomicFile first(p, "k");
  first.write("first", 5);
  {
    AtomicFile second(p, "k", /*make_folders=*/false, "snapshot-7");
    EXPECT_TRUE(fs::exists(p + ".snapshot-7.tmp"));
    second.write("second", 6);
    second.commit();
  }
  EXPECT_EQ(read(p), "second");
  EXPECT_FALSE(fs::exists(p + ".snapshot-7.tmp"));
  ASSERT_TRUE(fs::exists(p + ".tmp"));  // the first writer's, untouched
  first.commit();
  EXPECT_EQ(read(p), "first");
  // A file at the tagged name is left alone as at the untagged one.
  write("shard.snapshot-7.tmp", "stale");
  {
    AtomicFile again(p, "k", false, "snapshot-7");
    again.write("third", 5);
    again.commit();
  }
  EXPECT_EQ(read(p), "third");
  EXPECT_EQ(read(p + ".snapshot-7.tmp"), "stale");
}

TEST_F(FilesTest, AtomicFileNeverReplacesADeviceFifoOrLink) {
  const std::string f = fifo("pipe");
  EXPECT_NE(error_of([&] { AtomicFile a(f, "--out"); }).find("--out"), std::string::npos);
  struct stat st;
  ASSERT_EQ(::lstat(f.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  const std::string target = write("target", "keep");
  fs::create_symlink(target, path("link"));
  EXPECT_NE(error_of([&] { AtomicFile a(path("link"), "k"); }).find("symbolic link"),
            std::string::npos);
  EXPECT_TRUE(fs::is_symlink(path("link")));
  EXPECT_EQ(read(target), "keep");
  if (::geteuid() == 0) {  // the repro: a copy of /dev/null
    const std::string null = path("null");
    ASSERT_EQ(::mknod(null.c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
    EXPECT_NE(error_of([&] { AtomicFile a(null, "k"); }).find("character device"),
              std::string::npos);
    ASSERT_EQ(::lstat(null.c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode));
  }
}

TEST_F(FilesTest, AtomicFileRechecksTheTargetBeforeTheRename) {
  const std::string p = path("out");
  AtomicFile f(p, "k");
  f.write("x", 1);
  fs::create_directory(p);  // appears while the file is being written
  EXPECT_NE(error_of([&] { f.commit(); }).find("a directory"), std::string::npos);
  EXPECT_TRUE(fs::is_directory(p));
  EXPECT_FALSE(fs::exists(p + ".tmp"));
}

TEST_F(FilesTest, LineLogTruncatesOrAppendsAndRefusesNonRegularFiles) {
  const std::string p = write("m.jsonl", "old\n");
  {
    LineLog log(p, "metrics.jsonl_path", /*append=*/true);
    log.write_line("a");
  }
  EXPECT_EQ(read(p), "old\na\n");
  {
    LineLog log(p, "metrics.jsonl_path", /*append=*/false);
    log.write_line("b");
    EXPECT_EQ(read(p), "b\n");  // on disk at once, not at the end of the run
  }
  {
    LineLog log(path("new/dir/m.jsonl"), "k", false);  // missing folders are created
    log.write_line("c");
  }
  EXPECT_EQ(read(path("new/dir/m.jsonl")), "c\n");
  const std::string f = fifo("pipe");
  EXPECT_NE(error_of([&] { LineLog log(f, "metrics.jsonl_path", false); }).find("FIFO"),
            std::string::npos);
}

// A file-size limit (ulimit -f) for the scope, with SIGXFSZ ignored as
// remat's main() ignores it: a write past the limit then fails with EFBIG,
// the path a full disk (ENOSPC) takes too.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limited = saved_;
    limited.rlim_cur = bytes;
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit saved_{};
  void (*old_handler_)(int) = nullptr;
};

// What the system refuses mid-write is OutputError (exit 1), not bad
// input: the temporary goes, the target keeps its old bytes.
TEST_F(FilesTest, AWriteTheSystemRefusesKeepsTheOldFileAndLeavesNoTemporary) {
  const std::string p = write("ckpt.bin", "old");
  std::string message;
  {
    const FileSizeLimit limit(4096);
    try {
      AtomicFile f(p, "checkpoint.folder");
      const std::string big(64 * 1024, 'x');
      f.write(big.data(), static_cast<int64_t>(big.size()));
      f.commit();
    } catch (const OutputError& e) {
      message = e.what();
    }
  }
  EXPECT_NE(message.find("checkpoint.folder: cannot write"), std::string::npos) << message;
  EXPECT_NE(message.find("file-size limit"), std::string::npos) << message;
  EXPECT_NE(message.find("is untouched"), std::string::npos) << message;
  EXPECT_EQ(read(p), "old");
  EXPECT_FALSE(fs::exists(p + ".tmp"));
}

// A log line the system takes only part of is cut off again: the file ends
// with its last whole line, so every line still parses.
TEST_F(FilesTest, ALogLineTheSystemTakesPartOfIsUndone) {
  const std::string p = path("m.jsonl");
  LineLog log(p, "metrics.jsonl_path", /*append=*/false);
  const std::string line(1000, 'a');
  std::string message;
  int whole = 0;
  {
    const FileSizeLimit limit(4500);  // four lines and a half
    try {
      for (; whole < 10; ++whole) log.write_line(line);
    } catch (const OutputError& e) {
      message = e.what();
    }
  }
  EXPECT_EQ(whole, 4);
  EXPECT_NE(message.find("its last whole line"), std::string::npos) << message;
  std::string expected;
  for (int i = 0; i < 4; ++i) expected += line + "\n";
  EXPECT_EQ(read(p), expected);
}

// A file the process has read is never an output: not by its name, another
// spelling, a hard link, nor as the temporary an atomic write would first
// remove. Each refusal leaves its content as it was.
TEST_F(FilesTest, OutputsNeverReplaceAFileTheProcessRead) {
  const ProtectedInputs scope;  // as the CLI opens around a command
  const std::string input = write("job.toml", "[training]\nsteps = 1\n");
  read_regular_file(input, "config file", "a TOML file", 1 << 20);
  fs::create_hard_link(input, path("link.toml"));
  const std::string dotted = (dir_ / "." / "job.toml").string();
  for (const std::string& out : {input, dotted, path("link.toml")}) {
    const std::string e = error_of([&] { check_output_file(out, "metrics.jsonl_path"); });
    EXPECT_NE(e.find("metrics.jsonl_path: '" + out + "' is the config file this run reads"),
              std::string::npos)
        << e;
    EXPECT_NE(error_of([&] { AtomicFile f(out, "k"); }).find("this run reads"), std::string::npos);
    EXPECT_NE(error_of([&] { LineLog log(out, "k", /*append=*/false); }).find("this run reads"),
              std::string::npos);
  }
  EXPECT_NE(error_of([&] { check_output_file(dotted, "k"); }).find("the same file as '" + input),
            std::string::npos);
  // Its temporary: AtomicFile("job") would remove a stale "job.tmp" first.
  fs::rename(path("link.toml"), path("job.tmp"));
  EXPECT_NE(error_of([&] { check_output_file(path("job"), "k"); }).find("this run reads"),
            std::string::npos);
  EXPECT_NE(error_of([&] { AtomicFile f(path("job"), "k"); }).find("this run reads"),
            std::string::npos);
  EXPECT_EQ(read(input), "[training]\nsteps = 1\n");
  EXPECT_TRUE(fs::exists(path("job.tmp")));
  // Another file is an output as before. One read as kRewritten (a cache
  // the run rewrites on purpose) is an output of its own writer only (the
  // key it was read under): the run's metrics, say, may not replace it.
  EXPECT_EQ(error_of([&] { check_output_file(path("metrics.jsonl"), "k"); }), "");
  const std::string cache = write("cache.json", "{}");
  read_regular_file(cache, "cost_cache", "JSON", 1 << 20, InputUse::kRewritten);
  EXPECT_EQ(error_of([&] { check_output_file(cache, "cost_cache"); }), "");
  EXPECT_NE(error_of([&] {
              check_output_file(cache, "metrics.jsonl_path");
            }).find("is the cost_cache this run reads"),
            std::string::npos);
  {  // its writer replaces it (a new inode), then notes the new file
    AtomicFile rewrite(cache, "cost_cache");
    rewrite.write("[]", 2);
    rewrite.commit();
  }
  EXPECT_EQ(error_of([&] { check_output_file(cache, "metrics.jsonl_path"); }), "");
  note_input(cache, "cost_cache", InputUse::kRewritten);
  EXPECT_NE(error_of([&] { LineLog log(cache, "metrics.jsonl_path", false); }).find("this run"),
            std::string::npos);
  EXPECT_EQ(read(cache), "[]");
  const std::string tokens = write("tokens.npy", "x");
  note_input(tokens, ".npy token file");
  EXPECT_NE(error_of([&] { check_output_file(tokens, "--out"); }).find(".npy token file"),
            std::string::npos);
}

// The record lives as long as the outermost scope: a process running many
// jobs (these tests) may write a file an earlier job read.
TEST_F(FilesTest, InputsAreProtectedOnlyWithinTheirScope) {
  const std::string input = write("data.txt", "text");
  read_regular_file(input, "dataset file", "text", 1 << 20);  // no scope: not recorded
  EXPECT_EQ(error_of([&] { check_output_file(input, "k"); }), "");
  {
    const ProtectedInputs outer;
    {
      const ProtectedInputs inner;
      read_regular_file(input, "dataset file", "text", 1 << 20);
    }
    EXPECT_NE(error_of([&] { check_output_file(input, "k"); }).find("is the dataset file"),
              std::string::npos);
  }
  EXPECT_EQ(error_of([&] { check_output_file(input, "k"); }), "");
}

}  // namespace
}  // namespace remat
