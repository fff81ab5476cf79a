#include "mc/runtime/deadline.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/runtime/when_all.hpp"
#include "mc/tiered/tiered_backend.hpp"

#include "test_support.hpp"

#include "result_printer.hpp"

#include <doctest/doctest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <string>

using namespace mc::tiered;
using mc::test::numbered;
using namespace std::chrono_literals;

namespace {

struct temp_dir {
  temp_dir() : path(mc::test::make_temp_dir("tiered")) {}
  ~temp_dir() { mc::test::remove_tree(path); }
  std::string path;
};

tier_config dram(std::uint64_t cap, int prio = 100) {
  return tier_config{tier_type::dram, cap, prio, "OFFSET", "", false};
}
tier_config ssd(std::uint64_t cap, const std::string& path, int prio = 10) {
  return tier_config{tier_type::ssd, cap, prio, "OFFSET", path, false};
}

std::vector<std::byte> payload(std::size_t n, std::uint64_t seed) {
  auto b = mc::test::random_bytes(n, seed);
  std::vector<std::byte> out(n);
  if (n) std::memcpy(out.data(), b.data(), n);
  return out;
}

struct recorder {
  std::mutex m;
  std::vector<std::pair<std::string, removal_reason>> events;
  std::vector<value_version> versions;  // of the value that left, per event
  tiered_backend::observer fn() {
    return [this](const std::string& k, value_version v, removal_reason r) {
      std::lock_guard lk(m);
      events.emplace_back(k, r);
      versions.push_back(v);
    };
  }
};

/// Allocates, writes (through write()), commits.
mc::task<mc::result<void>> put(tiered_backend& be, std::string key, std::vector<std::byte> data,
                               std::optional<tier_type> where = {}) {
  auto h = co_await be.allocate(data.size(), where);
  if (!h) co_return h.error();
  if (auto w = co_await h->write(data); !w) co_return w;
  auto c = be.commit(std::move(key), std::move(*h));
  if (!c) co_return c.error();
  co_return mc::result<void>{};
}

mc::task<mc::result<std::vector<std::byte>>> fetch(tiered_backend& be, std::string key) {
  auto h = be.get(key);
  if (!h) co_return h.error();
  std::vector<std::byte> out(h->size());
  if (auto r = co_await h->read_into(out); !r) co_return r.error();
  co_return out;
}

}  // namespace

TEST_SUITE("tiered_backend") {
  TEST_CASE("a DRAM value round-trips and remove tells the observer") {
    mc::runtime::runtime rt(1);
    rt.start();
    auto be = tiered_backend::create(rt, {dram(1 << 20)}).value();
    recorder rec;
    be->set_observer(rec.fn());
    auto data = payload(1000, 1);
    auto h = rt.block_on(be->allocate(data.size()));
    REQUIRE(h);
    REQUIRE(h->tier() == tier_type::dram);
    REQUIRE(h->data().size() == 1000);
    std::memcpy(h->data().data(), data.data(), data.size());
    REQUIRE(be->commit("k", std::move(*h)));
    CHECK(be->exists("k"));
    auto r = be->get("k");
    REQUIRE(r);
    CHECK(std::memcmp(r->data().data(), data.data(), data.size()) == 0);
    auto copy = rt.block_on(fetch(*be, "k"));
    REQUIRE(copy);
    CHECK(*copy == data);
    // A region for the TransferEngine contains the value.
    bool inside = false;
    for (auto reg : be->dram_regions())
      inside |= r->data().data() >= reg.data() && r->data().data() + r->size() <= reg.data() + reg.size();
    CHECK(inside);
    REQUIRE(be->remove("k"));
    CHECK_FALSE(be->exists("k"));
    CHECK(mc::is(be->get("k").error(), mc::errc::object_not_found));
    CHECK(mc::is(be->remove("k").error(), mc::errc::object_not_found));
    // The pinned reader still sees the whole value; the space returns when it lets go.
    CHECK(std::memcmp(r->data().data(), data.data(), data.size()) == 0);
    CHECK(be->usage()[0].used > 0);
    r = mc::result<read_handle>{};
    CHECK(be->usage()[0].used == 0);
    REQUIRE(rec.events.size() == 1);
    CHECK(rec.events[0] == std::pair<std::string, removal_reason>{"k", removal_reason::removed});
  }

  TEST_CASE("a prefault DRAM arena is resident at start; without prefault it is not") {
    mc::runtime::runtime rt(1);
    rt.start();
    constexpr std::size_t cap = 16u << 20;
    // Pages of the arena resident now (mincore), of its whole 4 KiB pages.
    auto resident = [](std::span<std::byte> r) {
      const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
      const auto from = (reinterpret_cast<std::uintptr_t>(r.data()) + page - 1) & ~(page - 1);
      const auto to = (reinterpret_cast<std::uintptr_t>(r.data()) + r.size()) & ~(page - 1);
      std::vector<unsigned char> v((to - from) / page);
      REQUIRE(::mincore(reinterpret_cast<void*>(from), to - from, v.data()) == 0);
      std::size_t n = 0;
      for (auto b : v) n += b & 1;
      return std::pair{n, v.size()};
    };
    for (bool prefault : {true, false}) {
      CAPTURE(prefault);
      auto cfg = dram(cap);
      cfg.prefault = prefault;
      auto be = tiered_backend::create(rt, {cfg}).value();
      std::span<std::byte> arena;
      for (auto reg : be->dram_regions())
        if (reg.size() == cap) arena = reg;
      REQUIRE(arena.size() == cap);
      auto [in, all] = resident(arena);
      if (prefault)
        CHECK(in == all);
      else
        CHECK(in < all / 2);
    }
  }

  TEST_CASE("an uncommitted write handle frees its space; bad commits are refused") {
    mc::runtime::runtime rt(1);
    rt.start();
    auto be = tiered_backend::create(rt, {dram(1 << 20)}).value();
    {
      auto h = rt.block_on(be->allocate(4096));
      REQUIRE(h);
      CHECK(be->usage()[0].used == 4096);
    }
    CHECK(be->usage()[0].used == 0);
    CHECK(mc::is(be->commit("x", write_handle{}).error(), mc::errc::invalid_params));
    auto h = rt.block_on(be->allocate(10));
    CHECK(mc::is(be->commit("", std::move(*h)).error(), mc::errc::invalid_key));
    auto big = rt.block_on(be->allocate(2 << 20));
    CHECK(mc::is(big.error(), mc::errc::too_large));
    auto h2 = rt.block_on(be->allocate(10));
    auto w = rt.block_on(h2->write(payload(11, 1)));
    CHECK(mc::is(w.error(), mc::errc::buffer_overflow));
  }

  TEST_CASE("commit replaces atomically: old readers keep the whole old value") {
    mc::runtime::runtime rt(1);
    rt.start();
    auto be = tiered_backend::create(rt, {dram(1 << 20)}).value();
    recorder rec;
    be->set_observer(rec.fn());
    auto a = payload(5000, 1), b = payload(7000, 2);
    REQUIRE(rt.block_on(put(*be, "k", a)));
    auto old = be->get("k");
    REQUIRE(rt.block_on(put(*be, "k", b)));
    CHECK(old->size() == 5000);
    CHECK(std::memcmp(old->data().data(), a.data(), a.size()) == 0);
    CHECK(*rt.block_on(fetch(*be, "k")) == b);
    CHECK(be->count() == 1);
    CHECK(rec.events.empty());
    auto keys = be->keys();
    REQUIRE(keys.size() == 1);
    CHECK(keys[0].key == "k");
    CHECK(keys[0].size == 7000);
  }

  TEST_CASE("DRAM-only eviction drops the least recently used unpinned value") {
    mc::runtime::runtime rt(1);
    rt.start();
    auto be = tiered_backend::create(rt, {dram(4 * 4096)}).value();
    recorder rec;
    be->set_observer(rec.fn());
    for (int i = 0; i < 4; ++i) REQUIRE(rt.block_on(put(*be, numbered("k", i), payload(4096, i))));
    REQUIRE(be->get("k0"));  // touch: k1 is now the oldest
    auto pin2 = be->get("k2");
    REQUIRE(rt.block_on(put(*be, "k4", payload(4096, 4))));
    REQUIRE(rec.events.size() == 1);
    CHECK(rec.events[0].first == "k1");
    CHECK(rec.events[0].second == removal_reason::evicted);
    // k3 is next (k2 is pinned, so it is skipped).
    REQUIRE(rt.block_on(put(*be, "k5", payload(4096, 5))));
    REQUIRE(rec.events.size() == 2);
    CHECK(rec.events[1].first == "k3");
    CHECK(be->usage()[0].evictions == 2);
    CHECK(*rt.block_on(fetch(*be, "k2")) == payload(4096, 2));
  }

  TEST_CASE("a full tier with everything pinned refuses without damaging values") {
    mc::runtime::runtime rt(1);
    rt.start();
    auto be = tiered_backend::create(rt, {dram(2 * 4096)}).value();
    REQUIRE(rt.block_on(put(*be, "a", payload(4096, 1))));
    REQUIRE(rt.block_on(put(*be, "b", payload(4096, 2))));
    auto pa = be->get("a"), pb = be->get("b");
    auto h = rt.block_on(be->allocate(100));
    CHECK(mc::is(h.error(), mc::errc::no_available_handle));
    CHECK(be->usage()[0].allocation_failures == 1);
    CHECK(*rt.block_on(fetch(*be, "a")) == payload(4096, 1));
    CHECK(*rt.block_on(fetch(*be, "b")) == payload(4096, 2));
    pa = mc::result<read_handle>{};
    CHECK(rt.block_on(be->allocate(100)));
  }

  TEST_CASE("SSD values of 1 byte to 64 MiB round-trip through the staging buffers") {
    temp_dir dir;
    mc::runtime::runtime rt(1);
    rt.start();
    auto be =
        tiered_backend::create(rt, {dram(1 << 20), ssd(200 << 20, dir.path)}, backend_options{1 << 20, 4}).value();
    for (std::size_t size : {std::size_t(1), std::size_t(4095), std::size_t(4096), std::size_t(4097),
                             std::size_t(1 << 20) + 123, std::size_t(3 << 20) - 1, std::size_t(64) << 20}) {
      CAPTURE(size);
      auto data = payload(size, size);
      auto key = numbered("v", size);
      REQUIRE(rt.block_on(put(*be, key, data, tier_type::ssd)));
      auto h = be->get(key);
      REQUIRE(h);
      CHECK(h->tier() == tier_type::ssd);
      CHECK(h->data().empty());
      auto back = rt.block_on(fetch(*be, key));
      REQUIRE(back);
      CHECK(mc::test::checksum(back->data(), size) == mc::test::checksum(data.data(), size));
      // Unaligned partial read.
      if (size > 10) {
        std::vector<std::byte> part(size / 3 + 1);
        auto off = size / 2 - 1;
        if (off + part.size() > size) part.resize(size - off);
        REQUIRE(rt.block_on(h->read_into(part, off)));
        CHECK(std::memcmp(part.data(), data.data() + off, part.size()) == 0);
      }
    }
    std::vector<std::byte> two(2);
    CHECK(mc::is(rt.block_on(be->get("v1")->read_into(two)).error(), mc::errc::out_of_range));
  }

  TEST_CASE("the store's staging path reads and writes SSD values without a second buffer") {
    temp_dir dir;
    mc::runtime::runtime rt(1);
    rt.start();
    auto be = tiered_backend::create(rt, {ssd(64 << 20, dir.path)}, backend_options{1 << 20, 1}).value();
    const std::size_t size = (5 << 20) + 777;
    auto data = payload(size, 9);
    // Only ONE staging buffer exists: the direct path must not need another.
    auto ok = rt.block_on([](tiered_backend& be, const std::vector<std::byte>& data) -> mc::task<bool> {
      auto h = co_await be.allocate(data.size());
      if (!h) co_return false;
      auto sb = co_await be.acquire_staging(be.staging_chunk_size());
      if (!sb) co_return false;
      for (std::size_t off = 0; off < data.size(); off += sb->capacity().size()) {
        auto n = std::min(sb->capacity().size(), data.size() - off);
        std::memcpy(sb->data().data(), data.data() + off, n);
        if (!co_await h->write(sb->capacity().first(n))) co_return false;
      }
      if (!be.commit("v", std::move(*h))) co_return false;
      auto r = be.get("v");
      for (std::size_t off = 0; off < data.size(); off += sb->capacity().size()) {
        auto n = std::min(sb->capacity().size(), data.size() - off);
        if (!co_await r->read_into(sb->capacity().first(n), off)) co_return false;
        if (std::memcmp(sb->data().data(), data.data() + off, n) != 0) co_return false;
      }
      co_return true;
    }(*be, data));
    CHECK(ok);
  }

  TEST_CASE("staging is bounded: acquisition waits and can time out") {
    mc::runtime::runtime rt(1);
    rt.start();
    auto be = tiered_backend::create(rt, {dram(1 << 20)}, backend_options{1 << 20, 2}).value();
    auto r = rt.block_on([](tiered_backend& be) -> mc::task<bool> {
      auto a = co_await be.acquire_staging(10);
      auto b = co_await be.acquire_staging(1 << 30);
      REQUIRE((a && b));
      CHECK(a->data().size() == 10);
      CHECK(b->data().size() == (1 << 20));
      auto c = co_await mc::with_deadline(be.acquire_staging(1), 20ms);
      REQUIRE_FALSE(c);
      CHECK(mc::is(c.error(), mc::errc::timeout));
      *a = staging_buffer{};
      auto d = co_await mc::with_deadline(be.acquire_staging(1), 1s);
      CHECK_MESSAGE(d.has_value(), d.error().message());
      co_return d.has_value();
    }(*be));
    CHECK(r);
  }

  TEST_CASE("full DRAM demotes LRU values to SSD; full SSD evicts its LRU values") {
    temp_dir dir;
    mc::runtime::runtime rt(1);
    rt.start();
    auto be = tiered_backend::create(rt, {dram(3 * 8192), ssd(2 * 8192, dir.path)}).value();
    recorder rec;
    be->set_observer(rec.fn());
    for (int i = 0; i < 3; ++i) REQUIRE(rt.block_on(put(*be, numbered("k", i), payload(8000, i))));
    REQUIRE(be->get("k0"));
    REQUIRE(rt.block_on(put(*be, "k3", payload(8000, 3))));  // demotes k1
    CHECK(be->get("k1")->tier() == tier_type::ssd);
    CHECK(be->get("k0")->tier() == tier_type::dram);
    CHECK(rec.events.empty());
    CHECK(be->usage()[0].demotions == 1);
    REQUIRE(rt.block_on(put(*be, "k4", payload(8000, 4))));  // demotes k2 (k0, k3 newer)
    CHECK(be->get("k2")->tier() == tier_type::ssd);
    REQUIRE(rt.block_on(put(*be, "k5", payload(8000, 5))));  // demotes k0; SSD full -> evicts k1
    REQUIRE(rec.events.size() == 1);
    CHECK(rec.events[0] == std::pair<std::string, removal_reason>{"k1", removal_reason::evicted});
    CHECK(be->usage()[1].evictions == 1);
    for (int i : {0, 2, 3, 4, 5}) {
      auto v = rt.block_on(fetch(*be, numbered("k", i)));
      REQUIRE(v);
      CHECK(*v == payload(8000, i));
    }
    CHECK(be->count() == 5);
  }

  TEST_CASE("demotion does not need the pool: it works while every staging buffer is held") {
    temp_dir dir;
    mc::runtime::runtime rt(1);
    rt.start();
    auto be =
        tiered_backend::create(rt, {dram(2 * 8192), ssd(4 * 8192, dir.path)}, backend_options{1 << 20, 2}).value();
    auto ok = rt.block_on([](tiered_backend& be) -> mc::task<bool> {
      auto s1 = co_await be.acquire_staging(1);
      auto s2 = co_await be.acquire_staging(1);
      if (!s1 || !s2) co_return false;
      for (int i = 0; i < 4; ++i)
        if (!co_await put(be, numbered("k", i), payload(8000, i))) co_return false;
      auto h = be.get("k0");
      co_return h && h->tier() == tier_type::ssd;
    }(*be));
    CHECK(ok);
    CHECK(*rt.block_on(fetch(*be, "k0")) == payload(8000, 0));
  }

  TEST_CASE("concurrent commit, get and remove from two threads with pinned readers") {
    temp_dir dir;
    mc::runtime::runtime rt(2);
    rt.start();
    auto be = tiered_backend::create(rt, {dram(256 << 10), ssd(1 << 20, dir.path)}).value();
    std::atomic<int> bad{0};
    auto worker = [](tiered_backend& be, int t, std::atomic<int>& bad) -> mc::task<void> {
      std::vector<read_handle> pins;
      for (int i = 0; i < 1500; ++i) {
        int k = (i * 7 + t) % 40;
        std::string key = numbered("key", k);
        std::size_t size = 100 + static_cast<std::size_t>((i * 131 + t * 17) % 20000);
        // Content is self-describing: 8-byte header with size and seed.
        std::uint64_t seed = static_cast<std::uint64_t>(t) * 100000 + static_cast<std::uint64_t>(i);
        switch (i % 4) {
          case 0:
          case 1: {
            auto data = payload(size, seed);
            std::memcpy(data.data(), &seed, 8);
            auto r = co_await put(be, key, data);
            if (!r && !mc::is(r.error(), mc::errc::no_available_handle)) ++bad;
            break;
          }
          case 2: {
            auto h = be.get(key);
            if (!h) break;
            std::vector<std::byte> out(h->size());
            if (!co_await h->read_into(out)) {
              ++bad;
              break;
            }
            std::uint64_t s;
            std::memcpy(&s, out.data(), 8);
            auto expect = payload(out.size(), s);
            if (std::memcmp(out.data() + 8, expect.data() + 8, out.size() - 8) != 0) ++bad;
            pins.push_back(*h);
            if (pins.size() > 4) pins.erase(pins.begin());
            break;
          }
          default:
            (void)be.remove(key);
        }
      }
    };
    std::promise<void> p;
    boost::asio::co_spawn(rt.executor(1), worker(*be, 1, bad), [&](std::exception_ptr) { p.set_value(); });
    rt.block_on(worker(*be, 0, bad), 0);
    p.get_future().wait();
    CHECK(bad == 0);
    // Everything unpinned: after removing all keys the tiers are empty.
    for (auto& k : be->keys()) REQUIRE(be->remove(k.key));
    for (auto& u : be->usage()) CHECK(u.used == 0);
  }

  TEST_CASE("start-up errors name the tier; an SSD file is used by one process only") {
    temp_dir dir;
    mc::runtime::runtime rt(1);
    rt.start();
    auto be = tiered_backend::create(rt, {ssd(1 << 20, dir.path)});
    REQUIRE(be);
    // Same path in the same process: flock is per open file description.
    auto again = tiered_backend::create(rt, {ssd(1 << 20, dir.path)});
    REQUIRE_FALSE(again);
    CHECK(again.error().message.find("in use") != std::string::npos);
    std::string file = dir.path + "/plainfile";
    { std::ofstream(file) << "x"; }
    auto bad_path = tiered_backend::create(rt, {ssd(1 << 20, file + "/sub")});
    REQUIRE_FALSE(bad_path);
    CHECK(bad_path.error().message.find("tiers[0] (SSD)") != std::string::npos);
    auto empty = tiered_backend::create(rt, {});
    REQUIRE_FALSE(empty);
    CHECK(empty.error().code == mc::errc::invalid_params);
    auto bad_staging = tiered_backend::create(rt, {dram(4096)}, backend_options{1000, 1});
    REQUIRE_FALSE(bad_staging);
  }

  TEST_CASE("every commit gets a larger version; demotion keeps it; the observer gets the version that left") {
    temp_dir dir;
    mc::runtime::runtime rt(1);
    rt.start();
    auto be = tiered_backend::create(rt, {dram(2 * 8192), ssd(2 * 8192, dir.path)}).value();
    recorder rec;
    be->set_observer(rec.fn());
    std::map<std::string, value_version> committed;
    value_version last = 0;
    for (int i = 0; i < 3; ++i) {
      auto key = numbered("k", static_cast<std::uint64_t>(i));
      REQUIRE(rt.block_on(put(*be, key, payload(8000, i))));
      auto v = be->version_of(key);
      REQUIRE(v);
      CHECK(*v > last);
      last = committed[key] = *v;
    }
    // k0 was demoted to SSD by k2's allocation: same value, same version.
    REQUIRE(be->get("k0")->tier() == tier_type::ssd);
    CHECK(*be->version_of("k0") == committed["k0"]);
    for (auto& k : be->keys()) CHECK(k.version == committed[k.key]);
    // A replacement gets a larger version than the value it replaces.
    REQUIRE(rt.block_on(put(*be, "k1", payload(100, 9))));
    CHECK(*be->version_of("k1") > last);
    // Fill until something is evicted from SSD: the observer names its version.
    for (int i = 3; i < 6; ++i)
      REQUIRE(rt.block_on(put(*be, numbered("k", static_cast<std::uint64_t>(i)), payload(8000, i))));
    REQUIRE_FALSE(rec.events.empty());
    CHECK(rec.events[0].second == removal_reason::evicted);
    CHECK(rec.versions[0] == committed[rec.events[0].first]);
    CHECK(be->issue_version() > *be->version_of("k5"));
  }

  TEST_CASE("drop_superseded removes a value only when it is not newer than the given version") {
    mc::runtime::runtime rt(1);
    rt.start();
    auto be = tiered_backend::create(rt, {dram(1 << 20)}).value();
    recorder rec;
    be->set_observer(rec.fn());
    REQUIRE(rt.block_on(put(*be, "k", payload(10, 1))));
    auto v1 = *be->version_of("k");
    CHECK(mc::is(be->drop_superseded("k", v1 - 1).error(), mc::errc::invalid_version));
    CHECK(be->exists("k"));
    CHECK(rec.events.empty());
    REQUIRE(be->drop_superseded("k", v1));
    CHECK_FALSE(be->exists("k"));
    REQUIRE(rec.events.size() == 1);
    CHECK(rec.events[0] == std::pair<std::string, removal_reason>{"k", removal_reason::superseded});
    CHECK(rec.versions[0] == v1);
    CHECK(mc::is(be->drop_superseded("k", v1).error(), mc::errc::object_not_found));
    // A re-put after the superseding write is newer: an old notice cannot drop it.
    REQUIRE(rt.block_on(put(*be, "k", payload(10, 2))));
    CHECK(mc::is(be->drop_superseded("k", v1).error(), mc::errc::invalid_version));
    CHECK(be->exists("k"));
  }

  TEST_CASE("a commit with a given version: an older one than the held value is refused, the clock follows it") {
    mc::runtime::runtime rt(1);
    rt.start();
    auto be = tiered_backend::create(rt, {dram(1 << 20)}).value();
    auto commit_at = [&](const std::string& key, std::size_t n, std::uint64_t seed, value_version v) {
      auto h = rt.block_on(be->allocate(n));
      REQUIRE(h);
      auto bytes = payload(n, seed);
      std::memcpy(h->data().data(), bytes.data(), n);
      return be->commit(key, std::move(*h), 7, v);
    };
    const auto t1 = be->issue_version();
    const auto t2 = be->issue_version();
    auto c2 = commit_at("k", 1000, 2, t2);
    REQUIRE(c2);
    CHECK(*c2 == t2);  // the given version, not a fresh one
    CHECK(*be->version_of("k") == t2);
    CHECK(be->stamp_of("k")->tag == 7);
    const auto used = be->usage().at(0).used;
    // An older put arriving late: refused, the newer value stays, its space freed.
    auto c1 = commit_at("k", 3000, 1, t1);
    REQUIRE(c1.has_error());
    CHECK(mc::is(c1.error(), mc::errc::superseded));
    CHECK(*be->version_of("k") == t2);
    auto back = rt.block_on(fetch(*be, "k"));
    REQUIRE(back);
    CHECK(*back == payload(1000, 2));
    CHECK(be->usage().at(0).used == used);
    // The same version again (a put written twice) replaces; a newer one too.
    REQUIRE(commit_at("k", 500, 3, t2));
    CHECK(be->get("k")->size() == 500);
    // A version ahead of the clock moves it: later versions are larger.
    const auto ahead = be->issue_version() + 5'000'000'000u;
    REQUIRE(commit_at("k", 10, 4, ahead));
    CHECK(be->issue_version() > ahead);
    auto fresh = commit_at("k", 10, 5, 0);  // 0: issued at the commit
    REQUIRE(fresh);
    CHECK(*fresh > ahead);
  }

  TEST_CASE("versions keep increasing across a restart of the backend (hybrid clock)") {
    mc::runtime::runtime rt(1);
    rt.start();
    value_version before = 0;
    {
      auto be = tiered_backend::create(rt, {dram(1 << 20)}).value();
      for (int i = 0; i < 1000; ++i) (void)be->issue_version();  // run ahead of the wall clock a little
      REQUIRE(rt.block_on(put(*be, "k", payload(10, 1))));
      before = *be->version_of("k");
    }
    auto be = tiered_backend::create(rt, {dram(1 << 20)}).value();
    REQUIRE(rt.block_on(put(*be, "k", payload(10, 1))));
    CHECK(*be->version_of("k") > before);
    CHECK(before > 1'000'000'000ull * 1'600'000'000ull);  // wall-clock nanoseconds, not a counter from 0
  }
}
