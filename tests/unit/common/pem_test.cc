// ReadPemFile: the one PEM reader of the daemon and the C++ client.
#include "common/pem.h"

#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"

namespace nearprep {
namespace {

using testing_common::TempDir;

std::string Write(const TempDir& dir, const std::string& name,
                  const std::string& text) {
  const std::string path = (dir.dir() / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(ReadPemFileTest, ReturnsTheWholeFile) {
  TempDir dir("pem");
  const std::string text =
      "subject=CN test\n-----BEGIN CERTIFICATE-----\nTUlJ\n"
      "-----END CERTIFICATE-----\n";
  absl::StatusOr<std::string> pem =
      ReadPemFile(Write(dir, "a.pem", text), "tls.cert");
  ASSERT_TRUE(pem.ok()) << pem.status();
  EXPECT_EQ(*pem, text);
}

TEST(ReadPemFileTest, MissingFileNamesTheOptionAndPath) {
  TempDir dir("pem");
  const std::string path = (dir.dir() / "absent.pem").string();
  absl::StatusOr<std::string> pem = ReadPemFile(path, "tls_root_ca_file");
  EXPECT_EQ(pem.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pem.status().message(),
            "tls_root_ca_file: cannot read '" + path + "'");
}

TEST(ReadPemFileTest, RefusesAFileWithoutABeginLine) {
  TempDir dir("pem");
  const std::string path = Write(dir, "key.der", std::string("\x30\x82\x01", 3));
  absl::StatusOr<std::string> pem = ReadPemFile(path, "tls.key");
  EXPECT_EQ(pem.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pem.status().message(),
            "tls.key: '" + path + "' is not a PEM file (no -----BEGIN)");
}

TEST(ReadPemFileTest, RefusesAnEmptyFileAndAFolder) {
  TempDir dir("pem");
  EXPECT_EQ(ReadPemFile(Write(dir, "empty.pem", ""), "tls.cert").status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::string> pem = ReadPemFile(dir.path(), "tls.client_ca");
  EXPECT_FALSE(pem.ok());
  EXPECT_EQ(pem.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pem.status().message().rfind("tls.client_ca: ", 0), 0u)
      << pem.status();
}

}  // namespace
}  // namespace nearprep
