// Boost.Asio's compiled TLS part (asio::ssl over OpenSSL), once for the tree:
// with BOOST_ASIO_SEPARATE_COMPILATION (meson.build) the ssl functions are
// only declared elsewhere. It lives here, in mc_master_core, the one library
// that talks TLS (to etcd) and links OpenSSL; the rest of asio is compiled in
// mc_runtime (lib/runtime/src/asio_impl.cpp).
#ifndef BOOST_ASIO_SEPARATE_COMPILATION
#error "the tree is built with -DBOOST_ASIO_SEPARATE_COMPILATION (meson.build)"
#endif

#include <boost/asio/ssl/impl/src.hpp>
