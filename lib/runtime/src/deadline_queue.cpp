#include "mc/runtime/deadline_queue.hpp"

#include <boost/asio/error.hpp>

#include <chrono>

namespace mc {

std::shared_ptr<deadline_queue> deadline_queue::make(boost::asio::any_io_executor ex) {
  return std::make_shared<deadline_queue>(private_tag{}, std::move(ex));
}

deadline_queue::deadline_queue(private_tag, boost::asio::any_io_executor ex) : timer_(std::move(ex)) {}

deadline_queue::~deadline_queue() {
  // Entries outliving their queue would point at freed memory: detach them
  // (they then report not fired and their remove() does nothing).
  for (entry* e = head_; e != nullptr;) {
    entry* next = e->next_;
    e->q_ = nullptr;
    e->prev_ = e->next_ = nullptr;
    e = next;
  }
  // ~steady_timer cancels the wait; its handler holds only a weak_ptr.
}

void deadline_queue::entry::remove() noexcept {
  if (q_ != nullptr) q_->unlink(*this);
}

void deadline_queue::unlink(entry& e) noexcept {
  if (e.prev_ != nullptr)
    e.prev_->next_ = e.next_;
  else
    head_ = e.next_;
  if (e.next_ != nullptr)
    e.next_->prev_ = e.prev_;
  else
    tail_ = e.prev_;
  e.prev_ = e.next_ = nullptr;
  e.q_ = nullptr;
  --size_;
}

void deadline_queue::add(entry& e, time_point when, expire_fn fn, void* arg) {
  e.remove();
  e.when_ = when;
  e.fn_ = fn;
  e.arg_ = arg;
  e.fired_ = false;
  e.q_ = this;
  // From the back: with equal timeouts every new deadline is the latest.
  entry* after = tail_;
  while (after != nullptr && after->when_ > when) after = after->prev_;
  e.prev_ = after;
  e.next_ = after != nullptr ? after->next_ : head_;
  if (e.next_ != nullptr)
    e.next_->prev_ = &e;
  else
    tail_ = &e;
  if (after != nullptr)
    after->next_ = &e;
  else
    head_ = &e;
  ++size_;
  if (when < armed_) arm(when);
}

void deadline_queue::arm(time_point when) {
  armed_ = when;
  timer_.expires_at(when);  // cancels a wait for a later time: its handler sees operation_aborted
  timer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
    if (ec == boost::asio::error::operation_aborted) return;  // re-armed earlier, or the queue went away
    if (auto self = weak.lock()) self->on_timer();
  });
}

void deadline_queue::on_timer() {
  armed_ = time_point::max();
  const auto now = std::chrono::steady_clock::now();
  while (head_ != nullptr && head_->when_ <= now) {
    entry& e = *head_;
    unlink(e);
    e.fired_ = true;
    e.fn_(e.arg_);
  }
  if (head_ != nullptr) arm(head_->when_);
}

}  // namespace mc
