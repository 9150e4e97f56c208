// xclbin_gen: writes a metadata-only xclbin (no bitstream) for the
// nearprep_preprocess kernel, from the argument table the kernel itself uses
// (fpga_kernels/include/nearprep_kernel_abi.h). XRT's noop shim loads it like
// a hardware xclbin, so the host backend's device/xclbin/kernel/bo/run code
// is exercised without an FPGA. Debian's xclbinutil is broken, hence this.
//
// Layout written (struct axlf, xrt/xclbin.h):
//   axlf (magic "xclbin2", header, section headers) then, 8-byte aligned:
//   MEM_TOPOLOGY    one DDR4 bank tagged "bank0" (4 GiB, the SmartSSD's)
//   IP_LAYOUT       --cus N (default 1) AP_CTRL_CHAIN compute units
//                   "<kernel>:<kernel>_1" ... "_N", register maps 64 KiB apart
//   CONNECTIVITY    every pointer argument of every CU -> bank0 (the
//                   SmartSSD has one DDR bank: connectivity.cfg's sp= lines)
//   EMBEDDED_METADATA  the kernel XML XRT parses for argument names,
//                   register offsets and sizes (Vitis HLS layout: control
//                   registers from 0x10, 64-bit pointers every 12 bytes)
//
// Usage: xclbin_gen [--omit-arg NAME] [--cus N] OUTPUT.xclbin [PLATFORM_VBNV]
// The uuid is a hash of the metadata, so a rebuild gives the same file.
#include <xrt/xclbin.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "nearprep_kernel_abi.h"

namespace {

namespace nf = nearprep_fpga;

constexpr uint64_t kBankBase = 0x4000000000ull;
constexpr uint64_t kBankKiB = uint64_t{4} << 20;  // 4 GiB
constexpr uint64_t kCuBase = 0x1800000ull;
constexpr uint64_t kCuStride = 0x10000ull;  // register maps of consecutive CUs
constexpr int kMaxCus = 8;

int& NumCus() {
  static int n = 1;
  return n;
}
constexpr uint32_t kRegisterRange = 0x1000;

// Register offset of argument i in the s_axilite map (HLS layout: 0x00 ctrl,
// 0x04 gie, 0x08 ier, 0x0c isr, arguments from 0x10; each 64-bit pointer
// takes two data words and one reserved word).
// The arguments written: kKernelArgs, less one with --omit-arg (a test
// xclbin whose arguments do not match the host's ABI table).
std::vector<nf::KernelArg>& Args() {
  static std::vector<nf::KernelArg> args;
  return args;
}

uint32_t ArgOffset(int i) {
  uint32_t off = 0x10;
  for (int k = 0; k < i; ++k) off += Args()[k].kind == 1 ? 12 : 8;
  return off;
}

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// An XML attribute value: the kernel's pointer types are "ap_uint<512>*".
std::string XmlEscape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else if (c == '&') {
      out += "&amp;";
    } else if (c == '"') {
      out += "&quot;";
    } else {
      out += c;
    }
  }
  return out;
}

std::string KernelXml(const std::string& vbnv) {
  const std::string k = nf::kKernelName;
  std::string x;
  x += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x += "<project name=\"nearprep\">\n";
  x += "  <platform vendor=\"xilinx\" boardid=\"u2\" name=\"" + vbnv + "\" featureRomTime=\"0\">\n";
  x += "    <version major=\"1\" minor=\"0\"/>\n";
  x += "    <description/>\n";
  x += "    <board name=\"smartssd\" vendor=\"samsung\" fpga=\"xcku15p\"/>\n";
  x += "    <device name=\"fpga0\" fpgaDevice=\"kintexu:xcku15p\" addrWidth=\"0\">\n";
  x += "      <core name=\"OCL_REGION_0\" target=\"bitstream\" type=\"clc_region\" "
       "clockFreq=\"225MHz\" numComputeUnits=\"" + std::to_string(NumCus()) + "\">\n";
  x += "        <kernel name=\"" + k + "\" language=\"c\" vlnv=\"xilinx.com:hls:" + k +
       ":1.0\" attributes=\"\" preferredWorkGroupSizeMultiple=\"0\" workGroupSize=\"1\" "
       "interrupt=\"true\" hwControlProtocol=\"ap_ctrl_chain\" type=\"pl\">\n";
  x += "          <port name=\"S_AXI_CONTROL\" mode=\"slave\" range=\"" + Hex(kRegisterRange) +
       "\" dataWidth=\"32\" portType=\"addressable\" base=\"0x0\"/>\n";
  std::vector<std::string> ports;
  for (const nf::KernelArg& a : Args()) {
    if (a.kind != 1) continue;
    bool seen = false;
    for (const auto& p : ports) seen |= p == a.port;
    if (seen) continue;
    ports.push_back(a.port);
    x += "          <port name=\"" + std::string(a.port) +
         "\" mode=\"master\" range=\"0xFFFFFFFFFFFFFFFF\" dataWidth=\"512\" "
         "portType=\"addressable\" base=\"0x0\"/>\n";
  }
  for (int i = 0; i < static_cast<int>(Args().size()); ++i) {
    const nf::KernelArg& a = Args()[i];
    x += "          <arg name=\"" + std::string(a.name) + "\" addressQualifier=\"" +
         std::to_string(a.kind) + "\" id=\"" + std::to_string(i) + "\" port=\"" + a.port +
         "\" size=\"" + Hex(a.size) + "\" offset=\"" + Hex(ArgOffset(i)) + "\" hostOffset=\"0x0\" hostSize=\"" +
         Hex(a.size) + "\" type=\"" + XmlEscape(a.type) + "\"/>\n";
  }
  for (int c = 0; c < NumCus(); ++c) {
    x += "          <instance name=\"" + k + "_" + std::to_string(c + 1) + "\">\n";
    x += "            <addrRemap base=\"" + Hex(kCuBase + kCuStride * c) +
         "\" range=\"" + Hex(kRegisterRange) + "\" port=\"S_AXI_CONTROL\"/>\n";
    x += "          </instance>\n";
  }
  x += "        </kernel>\n";
  x += "      </core>\n";
  x += "    </device>\n";
  x += "  </platform>\n";
  x += "</project>\n";
  return x;
}

template <typename T>
void Append(std::vector<char>* v, const T& t) {
  const char* p = reinterpret_cast<const char*>(&t);
  v->insert(v->end(), p, p + sizeof(T));
}

// 128-bit FNV-1a style hash (two 64-bit lanes), for a stable uuid.
void HashUuid(const std::vector<char>& data, unsigned char out[16]) {
  uint64_t a = 0xcbf29ce484222325ull, b = 0x84222325cbf29ce4ull;
  for (char c : data) {
    a = (a ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    b = (b ^ static_cast<unsigned char>(c)) * 0x100000001b3ull + 0x9e3779b97f4a7c15ull;
  }
  std::memcpy(out, &a, 8);
  std::memcpy(out + 8, &b, 8);
  out[6] = static_cast<unsigned char>((out[6] & 0x0f) | 0x40);  // RFC 4122 version 4 shape
  out[8] = static_cast<unsigned char>((out[8] & 0x3f) | 0x80);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> pos;
  std::string omit;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--omit-arg" && i + 1 < argc) {
      omit = argv[++i];
    } else if (a == "--cus" && i + 1 < argc) {
      NumCus() = std::atoi(argv[++i]);
      if (NumCus() < 1 || NumCus() > kMaxCus) {
        std::fprintf(stderr, "--cus %s: expected 1..%d\n", argv[i], kMaxCus);
        return 2;
      }
    } else {
      pos.push_back(a);
    }
  }
  if (pos.empty() || pos.size() > 2) {
    std::fprintf(stderr, "usage: %s [--omit-arg NAME] [--cus N] OUTPUT.xclbin [PLATFORM_VBNV]\n", argv[0]);
    return 2;
  }
  for (const nf::KernelArg& a : nf::kKernelArgs) {
    if (omit != a.name) Args().push_back(a);
  }
  if (!omit.empty() && Args().size() == static_cast<size_t>(nf::kNumArgs)) {
    std::fprintf(stderr, "--omit-arg %s: no such kernel argument\n", omit.c_str());
    return 2;
  }
  const std::string vbnv = pos.size() == 2 ? pos[1] : "xilinx_u2_gen3x4_xdma_gc_2_202110_1";

  // MEM_TOPOLOGY
  std::vector<char> mem;
  Append(&mem, int32_t{1});
  Append(&mem, int32_t{0});  // padding to the 8-aligned mem_data array
  mem_data md;
  std::memset(&md, 0, sizeof(md));
  md.m_type = MEM_DDR4;
  md.m_used = 1;
  md.m_size = kBankKiB;
  md.m_base_address = kBankBase;
  std::memcpy(md.m_tag, "bank0", 6);
  Append(&mem, md);

  // IP_LAYOUT
  std::vector<char> ip;
  Append(&ip, int32_t{NumCus()});
  Append(&ip, int32_t{0});
  for (int c = 0; c < NumCus(); ++c) {
    ip_data id;
    std::memset(&id, 0, sizeof(id));
    id.m_type = IP_KERNEL;
    id.properties = IP_INT_ENABLE_MASK | (AP_CTRL_CHAIN << IP_CONTROL_SHIFT);
    id.m_base_address = kCuBase + kCuStride * static_cast<uint64_t>(c);
    const std::string cu =
        std::string(nf::kKernelName) + ":" + nf::kKernelName + "_" + std::to_string(c + 1);
    std::snprintf(reinterpret_cast<char*>(id.m_name), sizeof(id.m_name), "%s", cu.c_str());
    Append(&ip, id);
  }

  // CONNECTIVITY: pointer arguments of every CU -> bank0
  std::vector<char> con;
  int32_t n = 0;
  for (const nf::KernelArg& a : Args()) n += a.kind == 1;
  Append(&con, n * NumCus());
  for (int c = 0; c < NumCus(); ++c) {
    for (int i = 0; i < static_cast<int>(Args().size()); ++i) {
      if (Args()[i].kind != 1) continue;
      connection cn{i, c, 0};
      Append(&con, cn);
    }
  }

  const std::string xml = KernelXml(vbnv);
  std::vector<char> meta(xml.begin(), xml.end());

  struct Section {
    axlf_section_kind kind;
    const char* name;
    const std::vector<char>* data;
  };
  const Section sections[] = {
      {MEM_TOPOLOGY, "mem_topology", &mem},
      {IP_LAYOUT, "ip_layout", &ip},
      {CONNECTIVITY, "connectivity", &con},
      {EMBEDDED_METADATA, "metadata", &meta},
  };
  const int num = static_cast<int>(sizeof(sections) / sizeof(sections[0]));
  const size_t head = sizeof(axlf) + (num - 1) * sizeof(axlf_section_header);
  auto align8 = [](size_t v) { return (v + 7) & ~size_t{7}; };

  std::vector<char> file(align8(head), 0);
  std::vector<axlf_section_header> sh(num);
  for (int i = 0; i < num; ++i) {
    std::memset(&sh[i], 0, sizeof(sh[i]));
    sh[i].m_sectionKind = sections[i].kind;
    std::snprintf(sh[i].m_sectionName, sizeof(sh[i].m_sectionName), "%s", sections[i].name);
    sh[i].m_sectionOffset = file.size();
    sh[i].m_sectionSize = sections[i].data->size();
    file.insert(file.end(), sections[i].data->begin(), sections[i].data->end());
    file.resize(align8(file.size()), 0);
  }

  axlf top;
  std::memset(&top, 0, sizeof(top));
  std::memcpy(top.m_magic, "xclbin2", 8);
  top.m_signature_length = -1;
  std::memset(top.reserved, 0xFF, sizeof(top.reserved));
  std::memset(top.m_keyBlock, 0xFF, sizeof(top.m_keyBlock));
  top.m_header.m_length = file.size();
  top.m_header.m_versionMajor = 2;
  top.m_header.m_versionMinor = 13;
  top.m_header.m_mode = XCLBIN_FLAT;
  std::snprintf(reinterpret_cast<char*>(top.m_header.m_platformVBNV),
                sizeof(top.m_header.m_platformVBNV), "%s", vbnv.c_str());
  top.m_header.m_numSections = static_cast<uint32_t>(num);
  std::vector<char> hashed;
  for (const Section& s : sections) hashed.insert(hashed.end(), s.data->begin(), s.data->end());
  HashUuid(hashed, top.m_header.uuid);
  top.m_uniqueId = 0;
  std::memcpy(&top.m_uniqueId, top.m_header.uuid, 8);

  std::memcpy(file.data(), &top, sizeof(axlf) - sizeof(axlf_section_header));
  std::memcpy(file.data() + offsetof(axlf, m_sections), sh.data(),
              num * sizeof(axlf_section_header));

  const std::string out = pos[0];
  const std::string tmp = out + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    std::perror(tmp.c_str());
    return 1;
  }
  const bool ok = std::fwrite(file.data(), 1, file.size(), f) == file.size();
  if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), out.c_str()) != 0) {
    std::perror(out.c_str());
    return 1;
  }
  return 0;
}
