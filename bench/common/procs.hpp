#pragma once
// Child processes of inference_bench: spawn with PR_SET_PDEATHSIG (a child
// never outlives the benchmark, even when it crashes), stop by PID only, wait
// for a TCP port to answer.
#include <chrono>
#include <cstdint>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace mc::bench::proc {

/// fork + exec of args[0] (an absolute path), stdout and stderr to `log`.
/// Returns the child's PID, or -1.
inline pid_t spawn(const std::vector<std::string>& args, const std::string& log) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid != 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(1);
  int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
  }
  execv(argv[0], argv.data());
  _exit(127);
}

/// SIGTERM, then SIGKILL after 5 s; reaps the child.
inline void stop(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  for (int i = 0; i < 100; ++i) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

/// This process's offset into a benchmark's block of listening ports:
/// 4 × (pid mod 400), so a previous run that is still exiting never answers
/// in place of this run's servers. A program adds it to its own base; every
/// base + 1599 stays below the kernel's ephemeral range (32768-60999 by
/// default), where a port can be the local end of any outgoing connection at
/// that moment (a make bench run failed so: redis "bind: Address already in
/// use"). Bases in use: store_bench 24151, inference_bench 25951.
inline int pid_port_offset() { return static_cast<int>(getpid() % 400) * 4; }

/// Whether 127.0.0.1:port accepts a connection within `seconds`.
inline bool wait_port(int port, double seconds) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (ok) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace mc::bench::proc
