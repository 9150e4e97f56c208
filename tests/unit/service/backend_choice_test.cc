// The daemon's choice of backend (server/daemon/backend_choice.h). The fpga
// and auto branches with a loadable xclbin are tested where the FPGA backend
// is built (tests/unit/fpga/fpga_backend_test.cc).
#include "server/daemon/backend_choice.h"

#include <string>

#include "gtest/gtest.h"

namespace nearprep {
namespace {

TEST(BackendChoiceTest, CreatesCpuAndRefusesUnknown) {
  std::string why;
  BackendOptions o;
  o.kind = "cpu";
  auto cpu = CreateBackend(o, &why);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ((*cpu)->name(), "cpu");
  EXPECT_FALSE(why.empty());
  o.kind = "gpu";
  auto bad = CreateBackend(o, nullptr);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("gpu"), std::string::npos);
}

TEST(BackendChoiceTest, AutoFallsBackToCpuAndSaysWhy) {
  // No xclbin: whether or not this build has the FPGA backend, it cannot
  // start, so auto serves with cpu and an explicit fpga is refused.
  std::string why;
  BackendOptions o;
  o.kind = "auto";
  auto any = CreateBackend(o, &why);
  ASSERT_TRUE(any.ok()) << any.status();
  EXPECT_EQ((*any)->name(), "cpu");
  EXPECT_NE(why.find("using cpu"), std::string::npos) << why;
  o.kind = "fpga";
  EXPECT_FALSE(CreateBackend(o, nullptr).ok());
}

}  // namespace
}  // namespace nearprep
