#pragma once
/// Deadlines of many short operations of one thread, served by one timer.
///
/// with_deadline() (deadline.hpp) races an operation against a timer of its
/// own in a parallel group: a spawned coroutine, a timer and, when the
/// operation wins, the timer's cancellation completing before the caller
/// resumes. That is several allocations and a pass through the scheduler per
/// operation. An operation that can be stopped from outside - e.g. by
/// interrupting the one socket it waits on - registers here instead: an
/// entry (no allocation: it lives in the caller's frame) in a list ordered by
/// deadline, and one steady_timer armed for the earliest. Removing an entry
/// (the usual end) never touches the timer; when the timer fires it expires
/// what is due and re-arms for the next. With equal timeouts (the usual
/// case) each add is O(1); in general O(entries later than the new one).
///
/// Thread-safety: none. A queue, its entries and its timer belong to the
/// thread of the executor it was created with; every call is made there.
#include "mc/runtime/deadline.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <memory>

namespace mc {

class deadline_queue : public std::enable_shared_from_this<deadline_queue> {
 public:
  /// What an expired entry runs (on the queue's thread, from the timer's
  /// handler): must not add or remove entries of this queue.
  using expire_fn = void (*)(void* arg) noexcept;

  /// One registered deadline. Remove it (or destroy it) before the memory
  /// that its expire function touches goes away.
  class entry {
   public:
    entry() = default;
    entry(const entry&) = delete;
    entry& operator=(const entry&) = delete;
    ~entry() { remove(); }
    /// True once the deadline passed and the expire function ran.
    bool fired() const noexcept { return fired_; }
    /// Leaves the queue (no effect when not in one). Never touches the timer.
    void remove() noexcept;

   private:
    friend class deadline_queue;
    deadline_queue* q_ = nullptr;
    entry* prev_ = nullptr;
    entry* next_ = nullptr;
    time_point when_{};
    expire_fn fn_ = nullptr;
    void* arg_ = nullptr;
    bool fired_ = false;
  };

  /// A queue on `ex`'s thread. Hold it by shared_ptr (make()): the timer's
  /// handler checks that the queue still exists before touching it.
  static std::shared_ptr<deadline_queue> make(boost::asio::any_io_executor ex);
  ~deadline_queue();
  deadline_queue(const deadline_queue&) = delete;
  deadline_queue& operator=(const deadline_queue&) = delete;

  /// Registers `e` (which must not be in a queue) to run fn(arg) at `when`
  /// unless removed first. A deadline already passed fires at the timer's
  /// next run, not inside add().
  void add(entry& e, time_point when, expire_fn fn, void* arg);
  /// Entries registered now.
  std::size_t size() const noexcept { return size_; }

 private:
  struct private_tag {};

 public:
  deadline_queue(private_tag, boost::asio::any_io_executor ex);

 private:
  void unlink(entry& e) noexcept;
  void arm(time_point when);
  void on_timer();

  boost::asio::steady_timer timer_;
  time_point armed_ = time_point::max();  // when the timer's wait ends (max: no wait)
  entry* head_ = nullptr;                 // earliest deadline
  entry* tail_ = nullptr;                 // latest deadline
  std::size_t size_ = 0;
};

}  // namespace mc
