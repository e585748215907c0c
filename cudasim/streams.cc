#include "cudasim/streams.h"

#include <chrono>
#include <exception>
#include <string>

#include "cudasim/sim_internal.h"

namespace cudasim::detail {

void Sticky::set(cudaError_t error, const std::string& detail) {
  std::lock_guard<std::mutex> lock(mu_);
  if (code_.load() != 0) return;
  detail_ = detail;
  code_.store(static_cast<int>(error));
}

cudaError_t Sticky::get(std::string* detail) const {
  const int code = code_.load();
  if (code != 0 && detail != nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    *detail = detail_;
  }
  return static_cast<cudaError_t>(code);
}

void Sticky::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  code_.store(0);
  detail_.clear();
}

Stream::Stream(int id_, int device_, bool legacy_, bool blocking_, Sticky* sticky,
               uint64_t chaos_seed)
    : id(id_),
      device(device_),
      legacy(legacy_),
      blocking(blocking_),
      sticky_(sticky),
      chaos_seed_(chaos_seed),
      chaos_(chaos_seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(id_)),
      thread_([this] { run(); }) {}

Stream::~Stream() {
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // cannot happen with the runtime's ownership; never terminate
    return;
  }
  stop_and_join();
}

void Stream::push(Op op) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(op));
  }
  work_cv_.notify_one();
}

void Stream::wait_for(uint64_t seq) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return completed_ >= seq; });
}

bool Stream::done(uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_ >= seq;
}

void Stream::stop_and_join() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void Stream::run() {
  Op& op = running_;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopped and drained
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    for (const Dep& dep : op.deps) dep.stream->wait_for(dep.seq);
    if (chaos_seed_ != 0) {
      std::uniform_int_distribution<int> micros(0, 2000);
      std::this_thread::sleep_for(std::chrono::microseconds(micros(chaos_)));
    }
    if (op.work && sticky_->get() == cudaSuccess) {
      try {
        op.work();
      } catch (const KernelFault& e) {
        sticky_->set(cudaErrorLaunchFailure, op.what + ": " + e.what());
      } catch (const DeviceFault& e) {
        sticky_->set(e.error, op.what + ": " + e.detail);
      } catch (const std::exception& e) {
        sticky_->set(cudaErrorLaunchFailure, op.what + " threw: " + e.what());
      } catch (...) {
        sticky_->set(cudaErrorLaunchFailure, op.what + " threw a non-standard exception");
      }
    }
    op = Op{};  // release captured state before waking waiters
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++completed_;
    }
    done_cv_.notify_all();
  }
}

}  // namespace cudasim::detail
