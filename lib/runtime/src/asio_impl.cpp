// Boost.Asio's compiled part, once for the whole tree:
// BOOST_ASIO_SEPARATE_COMPILATION is a project-wide define (meson.build), so
// every other translation unit sees only declarations of asio's non-template
// functions and links these definitions from mc_runtime.
//
// Which backend sockets and timers use is decided in meson.build: epoll with
// Boost < 1.83, whose io_uring backend misroutes socket completions (a closed
// socket's cancel completes an unrelated socket's pending read; a closed
// socket's in-flight read takes the next socket's data). The tests in
// test/runtime/asio_backend_test.cpp fail on that backend.
#ifndef BOOST_ASIO_SEPARATE_COMPILATION
#error "the tree is built with -DBOOST_ASIO_SEPARATE_COMPILATION (meson.build)"
#endif

#include <boost/asio/impl/src.hpp>
