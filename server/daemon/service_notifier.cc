#include "server/daemon/service_notifier.h"

namespace nearprep {
namespace {

class NullNotifier : public ServiceNotifier {
 public:
  void Notify(const std::string&) override {}
  std::chrono::microseconds WatchdogInterval() const override {
    return std::chrono::microseconds(0);
  }
  bool active() const override { return false; }
};

}  // namespace

std::unique_ptr<ServiceNotifier> NullServiceNotifier() {
  return std::make_unique<NullNotifier>();
}

#ifndef NEARPREP_HAVE_LIBSYSTEMD
std::unique_ptr<ServiceNotifier> CreateServiceNotifier() {
  return NullServiceNotifier();
}
#endif

}  // namespace nearprep
