#pragma once
// What one operation costs the whole machine, for store_bench's cost rows:
// CPU time (user + system) and system calls summed over every process that
// takes part (ours: the bench client, the owner, the master; Redis: the
// server and redis-benchmark).
//
// Mechanisms (named so the figures can be reproduced):
//  - CPU: utime + stime of /proc/<pid>/stat (clock ticks, 10 ms here, so a
//    cost run lasts long enough for thousands of ticks' worth of operations)
//    for running processes; getrusage of a reaped child for redis-benchmark;
//  - system calls: one perf counter per thread on the tracepoint
//    raw_syscalls:sys_enter (tracefs), opened on every thread the processes
//    have when the run starts (a counter with `inherit` on a child started
//    for the run); io_uring_enter calls are system calls like any other,
//    and the counters are opened for the cost run only (a tracepoint
//    counter slows every system call a little: the timed runs go without).
// Needs tracefs (mounted for this process when the machine has not: see
// syscall_tracepoint) and perf_event_open on other processes (root, or
// perf_event_paranoid <= 1 and the same uid); without them the system-call
// figures are absent and the reason is printed.
#include <fcntl.h>
#include <linux/perf_event.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace mc::bench::cost {

/// CPU seconds (user + system) process `pid` has used so far; 0 if unknown.
inline double cpu_seconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto close = s.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return 0;
  std::istringstream in(s.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && in >> field; ++i)  // fields 14 (utime) and 15 (stime)
    if (i == 14 || i == 15) ticks += std::strtod(field.c_str(), nullptr);
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

/// The id of tracepoint raw_syscalls:sys_enter, or 0 (`why` says why).
/// Where tracefs is not mounted (a fresh machine) and we may mount it
/// (root), it is mounted in a mount namespace of this process only, so
/// nothing outlives the run (the children the bench starts share it; the
/// id is the kernel's, the same in every namespace). Call it before the
/// process has threads (unshare(CLONE_NEWNS) refuses a threaded process).
inline std::uint64_t syscall_tracepoint(std::string* why) {
  auto read_id = [] {
    for (const char* d : {"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}) {
      std::ifstream f(std::string(d) + "/events/raw_syscalls/sys_enter/id");
      std::uint64_t id = 0;
      if (f >> id && id != 0) return id;
    }
    return std::uint64_t{0};
  };
  if (auto id = read_id()) return id;
  if (::unshare(CLONE_NEWNS) != 0) {
    *why =
        std::string("tracefs (raw_syscalls:sys_enter) is not readable; unshare(CLONE_NEWNS): ") + std::strerror(errno);
    return 0;
  }
  if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      ::mount("nodev", "/sys/kernel/tracing", "tracefs", 0, nullptr) != 0) {
    *why = std::string("tracefs (raw_syscalls:sys_enter) is not readable; mounting it: ") + std::strerror(errno);
    return 0;
  }
  if (auto id = read_id()) return id;
  *why = "tracefs has no raw_syscalls:sys_enter";
  return 0;
}

/// Per-thread system-call counters over some processes.
class syscall_counters {
 public:
  explicit syscall_counters(std::uint64_t tracepoint) : id_(tracepoint) {}
  syscall_counters(const syscall_counters&) = delete;
  syscall_counters& operator=(const syscall_counters&) = delete;
  ~syscall_counters() {
    for (int fd : fds_) ::close(fd);
  }

  /// Counts every thread `pid` has now, except `skip_tid` (the caller's own
  /// thread, which only waits). False (and `why`) when a counter fails.
  bool add_process(pid_t pid, std::string* why, pid_t skip_tid = 0) {
    DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/task").c_str());
    if (!d) return *why = "no /proc/" + std::to_string(pid) + "/task", false;
    bool ok = true;
    while (auto* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      const auto tid = static_cast<pid_t>(std::atoi(e->d_name));
      if (tid == skip_tid) continue;
      if (!open_on(tid, false, why)) {
        ok = false;
        break;
      }
    }
    ::closedir(d);
    return ok;
  }

  /// Counts `pid` and every thread or child it starts from now on (read the
  /// sum after they have exited).
  bool add_inherited(pid_t pid, std::string* why) { return open_on(pid, true, why); }

  std::uint64_t read() const {
    std::uint64_t sum = 0;
    for (int fd : fds_) {
      std::uint64_t v = 0;
      if (::read(fd, &v, sizeof v) == static_cast<ssize_t>(sizeof v)) sum += v;
    }
    return sum;
  }

 private:
  bool open_on(pid_t tid, bool inherit, std::string* why) {
    perf_event_attr a{};
    a.type = PERF_TYPE_TRACEPOINT;
    a.size = sizeof(a);
    a.config = id_;
    a.inherit = inherit ? 1 : 0;
    const int fd = static_cast<int>(::syscall(SYS_perf_event_open, &a, tid, -1, -1, PERF_FLAG_FD_CLOEXEC));
    if (fd < 0) {
      if (errno == ESRCH) return true;  // a thread that just ended
      *why = std::string("perf_event_open: ") + std::strerror(errno);
      return false;
    }
    fds_.push_back(fd);
    return true;
  }

  std::uint64_t id_;
  std::vector<int> fds_;
};

/// Runs `args` (a shell-free argv; args[0] found on PATH) to its end with its
/// stdout captured, counting its system calls (when `counters` is given)
/// and returning its CPU seconds (user + system, from wait4's rusage).
/// -1 when it cannot be started.
inline double run_counted(const std::vector<std::string>& args, std::string& out, syscall_counters* counters,
                          std::string* why) {
  int pipefd[2], go[2];
  if (::pipe(pipefd) != 0) return -1;
  if (::pipe(go) != 0) {
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    return -1;
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    char c;
    ::close(go[1]);
    if (::read(go[0], &c, 1) != 1) _exit(126);  // the counters are open
    ::dup2(pipefd[1], 1);
    const int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) ::dup2(devnull, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    _exit(127);
  }
  ::close(pipefd[1]);
  ::close(go[0]);
  if (pid < 0) {
    ::close(pipefd[0]);
    ::close(go[1]);
    return -1;
  }
  if (counters && !counters->add_inherited(pid, why)) counters = nullptr;
  (void)!::write(go[1], "g", 1);
  ::close(go[1]);
  char buf[4096];
  for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(pipefd[0]);
  int status = 0;
  rusage ru{};
  while (::wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {}
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

}  // namespace mc::bench::cost
