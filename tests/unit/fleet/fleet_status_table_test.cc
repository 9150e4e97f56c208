// The C++ FleetClient's status table (FleetStatusAction) against the one in
// docs/protocol.md ("Status codes: retry, fail over or raise"): every row's
// code gets the row's action, every code 1..16 has a row, and a code outside
// the table raises. tests/python/test_fleet_faults.py checks the Python
// client's table against the same document.
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "client/cpp/fleet/fleet_client.h"
#include "gtest/gtest.h"

namespace nearprep {
namespace {

std::map<std::string, std::string> DocsTable() {
  std::ifstream f(std::string(NEARPREP_SOURCE_DIR) + "/docs/protocol.md");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  const size_t start = text.find("### Status codes: retry, fail over or raise");
  if (start == std::string::npos) return {};
  const size_t end = text.find("\n## ", start);
  const std::string section = text.substr(start, end == std::string::npos ? end : end - start);
  std::map<std::string, std::string> rows;
  const std::regex row(R"(\n\| `([A-Z_]+)` \| ([a-z ]+?) \|)");
  for (auto it = std::sregex_iterator(section.begin(), section.end(), row);
       it != std::sregex_iterator(); ++it) {
    rows[(*it)[1]] = (*it)[2];
  }
  return rows;
}

TEST(FleetStatusTable, MatchesTheDocsTable) {
  const std::map<std::string, std::string> docs = DocsTable();
  ASSERT_EQ(docs.size(), 16u) << "docs/protocol.md: the status table should list codes 1..16";
  for (int c = 1; c <= 16; ++c) {
    const auto code = static_cast<absl::StatusCode>(c);
    const std::string name = absl::StatusCodeToString(code);
    // absl spells them "DEADLINE_EXCEEDED" etc., as gRPC does.
    const auto row = docs.find(name);
    ASSERT_NE(row, docs.end()) << name << " has no row in docs/protocol.md";
    EXPECT_EQ(FleetActionName(FleetStatusAction(code)), row->second) << name;
  }
}

TEST(FleetStatusTable, CodesOutsideTheTableRaise) {
  EXPECT_EQ(FleetStatusAction(static_cast<absl::StatusCode>(42)), FleetAction::kRaise);
  EXPECT_EQ(FleetStatusAction(absl::StatusCode::kOk), FleetAction::kRaise);
}

}  // namespace
}  // namespace nearprep
