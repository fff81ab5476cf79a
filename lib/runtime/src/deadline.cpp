#include "mc/runtime/deadline.hpp"

#include <boost/asio/as_tuple.hpp>

namespace mc {

task<result<void>> sleep_for(duration d) {
  boost::asio::steady_timer t(co_await boost::asio::this_coro::executor, d);
  auto [ec] = co_await t.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
  if (ec) co_return fail(errc::cancelled);
  co_return result<void>{};
}

}  // namespace mc
