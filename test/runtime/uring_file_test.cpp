#include "mc/runtime/deadline.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/runtime/uring_file.hpp"
#include "mc/runtime/when_all.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>

using namespace std::chrono_literals;
namespace rt = mc::runtime;

namespace {

/// Page-aligned anonymous memory, unmapped on destruction.
struct aligned_buf {
  explicit aligned_buf(std::size_t n) : size(n) {
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    data = static_cast<std::byte*>(p);
  }
  ~aligned_buf() { ::munmap(data, size); }
  std::span<std::byte> span() { return {data, size}; }
  std::byte* data;
  std::size_t size;
};

struct temp_dir {
  temp_dir() : path(mc::test::make_temp_dir("uring")) {}
  ~temp_dir() { mc::test::remove_tree(path); }
  std::string path;
};

mc::task<mc::result<void>> round_trip(const rt::uring_file& f, std::uint64_t off, std::span<std::byte> out,
                                      std::span<std::byte> in) {
  auto w = co_await f.write_at(off, out);
  if (!w) co_return w.error();
  if (*w != out.size()) co_return mc::fail(mc::errc::short_io);
  auto r = co_await f.read_at(off, in);
  if (!r) co_return r.error();
  if (*r != in.size()) co_return mc::fail(mc::errc::short_io);
  co_return mc::result<void>{};
}

/// Runs `fn` in a forked child (never returns into doctest there); returns its
/// exit code, or -1 if it died abnormally.
template <class F>
int run_in_child(F fn) {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int code = 90;
    try {
      code = fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: exception: %s\n", e.what());
    } catch (...) {}
    _exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_SUITE("uring_file") {
  TEST_CASE("random data round-trips at sizes from 4 KiB to 64 MiB") {
    temp_dir dir;
    rt::runtime r(1);
    r.start();
    auto f = rt::uring_file::open(dir.path + "/data", rt::file_mode::create_truncate);
    REQUIRE(f);
    std::uint64_t off = 0;
    for (std::size_t size : {std::size_t(4096), std::size_t(12288), std::size_t(1) << 20, (std::size_t(3) << 20) + 8192,
                             std::size_t(64) << 20}) {
      CAPTURE(size);
      aligned_buf out(size), in(size);
      auto bytes = mc::test::random_bytes(size, size);
      std::memcpy(out.data, bytes.data(), size);
      auto res = r.block_on(round_trip(*f, off, out.span(), in.span()));
      REQUIRE_MESSAGE(res, res.error().message());
      CHECK(mc::test::checksum(in.data, size) == mc::test::checksum(bytes.data(), size));
      off += size;
    }
  }

  TEST_CASE("registered fixed buffers are used and round-trip") {
    temp_dir dir;
    rt::runtime r(1);
    r.start();
    auto f = rt::uring_file::open(dir.path + "/fixed", rt::file_mode::create_truncate);
    REQUIRE(f);
    const std::size_t size = 2 << 20;
    aligned_buf out(size), in(size);
    auto reg_out = rt::register_fixed_buffer(out.span());
    auto reg_in = rt::register_fixed_buffer(in.span());
    if (!reg_out || !reg_in) {
      MESSAGE("fixed buffers unavailable: " << rt::last_io_error().message);
      return;
    }
    auto bytes = mc::test::random_bytes(size, 7);
    std::memcpy(out.data, bytes.data(), size);
    auto res = r.block_on(round_trip(*f, 0, out.span(), in.span()));
    REQUIRE(res);
    CHECK(std::memcmp(in.data, bytes.data(), size) == 0);
    auto st = r.block_on(rt::current_uring_stats());
    CHECK(st.fixed_ops >= 2);
    CHECK(st.register_failures == 0);
    // After unregistering, the same memory goes through plain I/O.
    reg_out->reset();
    res = r.block_on(round_trip(*f, 0, out.span(), in.span()));
    REQUIRE(res);
    auto st2 = r.block_on(rt::current_uring_stats());
    CHECK(st2.plain_ops >= st.plain_ops + 1);
  }

  TEST_CASE("misaligned buffer, offset or length is refused before submission") {
    temp_dir dir;
    rt::runtime r(1);
    r.start();
    auto f = rt::uring_file::open(dir.path + "/mis", rt::file_mode::create_truncate);
    REQUIRE(f);
    aligned_buf b(3 * 4096);
    auto res = r.block_on(f->write_at(0, b.span().subspan(1, 4096)));
    CHECK(mc::is(res.error(), mc::errc::misaligned));
    res = r.block_on(f->write_at(512, b.span().first(4096)));
    CHECK(mc::is(res.error(), mc::errc::misaligned));
    res = r.block_on(f->read_at(0, b.span().first(4095)));
    CHECK(mc::is(res.error(), mc::errc::misaligned));
    auto st = r.block_on(rt::current_uring_stats());
    CHECK(st.fixed_ops + st.plain_ops == 0);
  }

  TEST_CASE("reading past the end of the file reports a short read") {
    temp_dir dir;
    rt::runtime r(1);
    r.start();
    auto f = rt::uring_file::open(dir.path + "/short", rt::file_mode::create_truncate);
    REQUIRE(f);
    aligned_buf b(8192);
    REQUIRE(r.block_on(f->write_at(0, b.span().first(4096))));
    auto res = r.block_on(f->read_at(0, b.span()));
    CHECK(mc::is(res.error(), mc::errc::short_io));
  }

  TEST_CASE("I/O errors carry the errno text") {
    temp_dir dir;
    rt::runtime r(1);
    r.start();
    auto f = rt::uring_file::open(dir.path + "/ro", rt::file_mode::create_truncate);
    REQUIRE(f);
    f->close();
    auto ro = rt::uring_file::open(dir.path + "/ro", rt::file_mode::read_only);
    REQUIRE(ro);
    aligned_buf b(4096);
    auto res = r.block_on(ro->write_at(0, b.span()));
    REQUIRE_FALSE(res);
    CHECK(mc::is(res.error(), mc::errc::io_error));
    auto missing = rt::uring_file::open(dir.path + "/nope/x", rt::file_mode::read_only);
    REQUIRE_FALSE(missing);
    CHECK(mc::is(missing.error(), mc::errc::io_error));
    CHECK(rt::last_io_error().sys_errno == ENOENT);
    CHECK(rt::last_io_error().message.find("No such file") != std::string::npos);
  }

  TEST_CASE("O_DIRECT on a filesystem without support is reported as unsupported or works") {
    // /dev/shm is tmpfs: recent kernels accept O_DIRECT there, older refuse (EINVAL).
    auto f = rt::uring_file::open("/dev/shm/mc-uring-test-probe", rt::file_mode::create_truncate);
    if (!f) CHECK(mc::is(f.error(), mc::errc::unsupported));
    ::unlink("/dev/shm/mc-uring-test-probe");
  }

  TEST_CASE("a full filesystem yields no_space (tiny tmpfs in a private mount namespace)") {
    temp_dir dir;
    int code = run_in_child([&]() -> int {
      if (::unshare(CLONE_NEWNS) != 0) return 77;
      if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return 77;
      if (::mount("tmpfs", dir.path.c_str(), "tmpfs", 0, "size=64k") != 0) return 77;
      int code = 0;
      {
        auto f = rt::uring_file::open(dir.path + "/full", rt::file_mode::create_truncate);
        if (!f) return mc::is(f.error(), mc::errc::unsupported) ? 77 : 2;
        rt::runtime r(1);
        r.start();
        aligned_buf b(1 << 20);
        auto res = r.block_on(f->write_at(0, b.span()));
        code = !res && mc::is(res.error(), mc::errc::no_space) ? 0 : 3;
        auto fa = f->allocate(1 << 20);
        if (fa || !mc::is(fa.error(), mc::errc::no_space)) code = 4;
      }
      ::umount(dir.path.c_str());
      return code;
    });
    if (code == 77) {
      MESSAGE("skipped: cannot mount a tmpfs here (needs root)");
      return;
    }
    CHECK(code == 0);
  }

  TEST_CASE("RLIMIT_MEMLOCK too small gives memlock_limit and I/O still works unregistered") {
    temp_dir dir;
    int code = run_in_child([&]() -> int {
      // The runtime's own rings are created first (asio's ring alone exceeds a
      // tiny limit). Capabilities are per thread: only this thread loses it.
      rt::runtime r(1);
      r.start();
      // Drop CAP_IPC_LOCK (root bypasses the limit with it), then shrink the limit.
      __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
      __user_cap_data_struct data[2]{};
      if (::syscall(SYS_capget, &hdr, data) != 0) return 77;
      data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
      if (::syscall(SYS_capset, &hdr, data) != 0) return 77;
      rlimit lim{1024 * 1024, 1024 * 1024};
      if (::setrlimit(RLIMIT_MEMLOCK, &lim) != 0) return 77;
      aligned_buf b(16 << 20);
      auto reg = rt::register_fixed_buffer(b.span());
      if (reg) return 5;
      if (!mc::is(reg.error(), mc::errc::memlock_limit)) return 6;
      if (rt::last_io_error().message.find("RLIMIT_MEMLOCK") == std::string::npos) return 7;
      auto f = rt::uring_file::open(dir.path + "/ml", rt::file_mode::create_truncate);
      if (!f) return 8;
      std::memset(b.data, 0x5a, b.size);
      auto w = r.block_on(f->write_at(0, b.span()));
      std::memset(b.data, 0, b.size);
      auto rd = r.block_on(f->read_at(0, b.span()));
      r.stop();
      if (!w || !rd || b.data[b.size - 1] != std::byte{0x5a}) return 9;
      return 0;
    });
    if (code == 77) {
      MESSAGE("skipped: cannot drop CAP_IPC_LOCK / set RLIMIT_MEMLOCK");
      return;
    }
    CHECK(code == 0);
  }

  TEST_CASE("concurrent I/O from two runtime threads uses one ring each and keeps data intact") {
    temp_dir dir;
    rt::runtime r(2);
    r.start();
    auto f = rt::uring_file::open(dir.path + "/conc", rt::file_mode::create_truncate);
    REQUIRE(f);
    constexpr std::size_t block = 256 * 1024, per_thread = 16;
    std::array<std::unique_ptr<aligned_buf>, 2> bufs{std::make_unique<aligned_buf>(block * per_thread),
                                                     std::make_unique<aligned_buf>(block * per_thread)};
    auto worker = [](const rt::uring_file& f, aligned_buf& b, std::size_t t) -> mc::task<mc::result<void>> {
      std::vector<mc::task<mc::result<std::size_t>>> ops;
      for (std::size_t i = 0; i < per_thread; ++i) {
        auto bytes = mc::test::random_bytes(block, t * 100 + i);
        std::memcpy(b.data + i * block, bytes.data(), block);
        ops.push_back(f.write_at((i * 2 + t) * block, b.span().subspan(i * block, block)));
      }
      for (auto& x : co_await mc::when_all(std::move(ops)))
        if (!x) co_return x.error();
      std::memset(b.data, 0, b.size);
      std::vector<mc::task<mc::result<std::size_t>>> reads;
      for (std::size_t i = 0; i < per_thread; ++i)
        reads.push_back(f.read_at((i * 2 + t) * block, b.span().subspan(i * block, block)));
      for (auto& x : co_await mc::when_all(std::move(reads)))
        if (!x) co_return x.error();
      for (std::size_t i = 0; i < per_thread; ++i) {
        auto bytes = mc::test::random_bytes(block, t * 100 + i);
        if (std::memcmp(b.data + i * block, bytes.data(), block) != 0) co_return mc::fail(mc::errc::io_error);
      }
      co_return mc::result<void>{};
    };
    std::promise<mc::result<void>> p1;
    auto fut1 = p1.get_future();
    boost::asio::co_spawn(r.executor(1), worker(*f, *bufs[1], 1),
                          [&p1](std::exception_ptr, mc::result<void> v) { p1.set_value(v); });
    auto r0 = r.block_on(worker(*f, *bufs[0], 0), 0);
    auto r1 = fut1.get();
    CHECK_MESSAGE(r0, r0.error().message());
    CHECK_MESSAGE(r1, r1.error().message());
    auto s0 = r.block_on(rt::current_uring_stats(), 0);
    auto s1 = r.block_on(rt::current_uring_stats(), 1);
    CHECK(s0.plain_ops + s0.fixed_ops >= 2 * per_thread);
    CHECK(s1.plain_ops + s1.fixed_ops >= 2 * per_thread);
  }

  TEST_CASE("reads started by one completion round share one submission") {
    temp_dir dir;
    rt::runtime r(1);
    r.start();
    auto f = rt::uring_file::open(dir.path + "/batch", rt::file_mode::create_truncate);
    REQUIRE(f);
    constexpr std::size_t block = 4096, blocks = 64, depth = 8, per_reader = 200;
    aligned_buf data(block * blocks);
    auto bytes = mc::test::random_bytes(data.size, 11);
    std::memcpy(data.data, bytes.data(), data.size);
    REQUIRE(r.block_on(f->write_at(0, data.span())));
    auto before = r.block_on(rt::current_uring_stats());
    // depth readers, each a chain of reads: every read after the first is
    // started by a coroutine that the previous read's completion resumed.
    auto reader = [](const rt::uring_file& f, const std::vector<unsigned char>& want,
                     std::size_t seed) -> mc::task<mc::result<void>> {
      aligned_buf b(block);
      for (std::size_t i = 0; i < per_reader; ++i) {
        auto at = (seed * 7 + i * 13) % blocks * block;
        auto n = co_await f.read_at(at, b.span());
        if (!n) co_return n.error();
        if (*n != block || std::memcmp(b.data, want.data() + at, block) != 0) co_return mc::fail(mc::errc::io_error);
      }
      co_return mc::result<void>{};
    };
    auto res = r.block_on([](const rt::uring_file& f, const std::vector<unsigned char>& want,
                             decltype(reader) reader) -> mc::task<mc::result<void>> {
      std::vector<mc::task<mc::result<void>>> rs;
      for (std::size_t d = 0; d < depth; ++d) rs.push_back(reader(f, want, d));
      for (auto& x : co_await mc::when_all(std::move(rs)))
        if (!x) co_return x;
      co_return mc::result<void>{};
    }(*f, bytes, reader));
    REQUIRE_MESSAGE(res, res.error().message());
    auto after = r.block_on(rt::current_uring_stats());
    auto ops = (after.plain_ops + after.fixed_ops) - (before.plain_ops + before.fixed_ops);
    auto submits = after.submit_calls - before.submit_calls;
    CHECK(ops == depth * per_reader);
    // One system call per read would be `ops`; a round that completes k reads
    // submits the k reads it started with one.
    CHECK_MESSAGE(submits < ops, submits << " submissions for " << ops << " reads");
  }

  TEST_CASE("a cancelled read completes only after the kernel released the buffer") {
    temp_dir dir;
    rt::runtime r(1);
    r.start();
    auto f = rt::uring_file::open(dir.path + "/cancel", rt::file_mode::create_truncate);
    REQUIRE(f);
    const std::size_t size = 32 << 20;
    aligned_buf b(size);
    REQUIRE(r.block_on(f->write_at(0, b.span())));
    // A 1 ns deadline cancels the read while it is in flight; either outcome is
    // fine, but the coroutine must only finish once the CQE has arrived.
    for (int i = 0; i < 20; ++i) {
      auto res = r.block_on(mc::with_deadline(f->read_at(0, b.span()), 1ns));
      if (!res) CHECK((mc::is(res.error(), mc::errc::timeout) || mc::is(res.error(), mc::errc::cancelled)));
    }
    // The ring is still usable afterwards.
    auto again = r.block_on(f->read_at(0, b.span()));
    CHECK(again);
  }
}
