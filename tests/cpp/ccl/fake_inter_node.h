// A fake inter-node transport for the tests: a socketpair between every two ranks, made in the
// parent before the ranks are forked, and HcclInterNodeOps that write and read them. Blocking,
// with small socket buffers, like a TCP transport whose sends wait for the receiver.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "npu/hccl.h"

namespace ccltest {

class FakeInterNode {
 public:
  explicit FakeInterNode(uint32_t n) : n_(n), fds_(n * n, -1) {
    for (uint32_t a = 0; a < n; ++a) {
      for (uint32_t b = a + 1; b < n; ++b) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0) {
          const int small = 16 * 1024;
          for (int fd : sv) {
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
          }
          fds_[a * n + b] = sv[0];
          fds_[b * n + a] = sv[1];
        }
      }
    }
  }
  ~FakeInterNode() {
    for (int fd : fds_) {
      if (fd >= 0) close(fd);
    }
  }

  // The ops for `rank` (call in that rank's process).
  HcclInterNodeOps ops(uint32_t rank) {
    rank_ = rank;
    return HcclInterNodeOps{this, &FakeInterNode::send, &FakeInterNode::recv};
  }
  uint64_t bytesSent() const { return sent_; }
  uint64_t calls() const { return calls_; }

 private:
  static HcclResult send(void* ctx, const void* buf, uint64_t bytes, uint32_t peer, char* error,
                         size_t errorLen) {
    auto* self = static_cast<FakeInterNode*>(ctx);
    ++self->calls_;
    const int fd = self->fds_[self->rank_ * self->n_ + peer];
    const char* p = static_cast<const char*>(buf);
    while (bytes > 0) {
      const ssize_t k = write(fd, p, bytes);
      if (k <= 0) {
        std::snprintf(error, errorLen, "write to rank %u: %s", peer, std::strerror(errno));
        return HCCL_E_TCP_TRANSFER;
      }
      p += k;
      bytes -= k;
      self->sent_ += k;
    }
    return HCCL_SUCCESS;
  }
  static HcclResult recv(void* ctx, void* buf, uint64_t bytes, uint32_t peer, char* error,
                         size_t errorLen) {
    auto* self = static_cast<FakeInterNode*>(ctx);
    ++self->calls_;
    const int fd = self->fds_[self->rank_ * self->n_ + peer];
    char* p = static_cast<char*>(buf);
    while (bytes > 0) {
      const ssize_t k = read(fd, p, bytes);
      if (k <= 0) {
        std::snprintf(error, errorLen, "read from rank %u: %s", peer,
                      k == 0 ? "connection closed" : std::strerror(errno));
        return HCCL_E_TCP_TRANSFER;
      }
      p += k;
      bytes -= k;
    }
    return HCCL_SUCCESS;
  }

  uint32_t n_;
  uint32_t rank_ = 0;
  std::vector<int> fds_;
  uint64_t sent_ = 0;
  uint64_t calls_ = 0;
};

}  // namespace ccltest
