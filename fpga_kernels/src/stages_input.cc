// Dataflow processes from DDR to scan tokens: ReadControl, BurstRead,
// ParseHeader, Destuff. See dataflow.h for the network and its rules.
#include <cstdint>
#include <cstring>

#include "dataflow.h"
#include "jpeg_l1.h"
#include "nearprep_kernel_abi.h"

namespace nearprep_fpga {
namespace {

inline uint64_t U64(uint32_t lo, uint32_t hi) {
  return static_cast<uint64_t>(lo) | (static_cast<uint64_t>(hi) << 32);
}

inline float F32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);  // a bit cast (llvm.memcpy of 4 bytes), no library call
  return f;
}

// Reads the next byte of the image into *b; false past its last byte.
inline bool NextByte(hls::stream<uint8_t, kByteDepth>& bytes, uint32_t size, uint32_t* consumed,
                     uint8_t* b) {
#pragma HLS INLINE
  if (*consumed >= size) return false;
  *b = bytes.read();
  ++*consumed;
  return true;
}

// The marker segments up to the scan's SOS, read from the byte stream with
// libjpeg's rules (jdmarker.c next_marker / read_markers, as the CPU path's
// TF_COMPAT decode applies them). Returns the status; *consumed counts the
// bytes read.
uint32_t ParseMarkers(hls::stream<uint8_t, kByteDepth>& bytes, uint32_t size, uint32_t* consumed,
                      JpegHeader* hdr, uint32_t* segments) {
  uint8_t seg[kSegMax];
  uint8_t b0 = 0, b1 = 0;
  if (size < 4) return kStatusCorrupt;
  NextByte(bytes, size, consumed, &b0);
  NextByte(bytes, size, consumed, &b1);
  if (b0 != 0xFF || b1 != 0xD8) return kStatusCorrupt;
markers:
  for (int guard = 0; guard < 65536; ++guard) {
#pragma HLS LOOP_TRIPCOUNT min = 4 max = 20
    uint8_t b = 0;
    // libjpeg's next_marker warns (JWRN_EXTRANEOUS_DATA) on junk: corrupt.
    if (!NextByte(bytes, size, consumed, &b) || b != 0xFF) return kStatusCorrupt;
  fill:
    while (b == 0xFF) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 2
      if (!NextByte(bytes, size, consumed, &b)) return kStatusCorrupt;
    }
    const int m = b;
    if (m == 0xD8 || m == 0xD9 || (m >= 0xD0 && m <= 0xD7) || m == 0x01 || m == 0x00) {
      return kStatusCorrupt;  // unexpected standalone marker before SOS
    }
    const uint32_t remaining = size - *consumed;  // from the length field on
    if (remaining < 2) return kStatusCorrupt;
    uint8_t hi = 0, lo = 0;
    NextByte(bytes, size, consumed, &hi);
    NextByte(bytes, size, consumed, &lo);
    const uint32_t len = (static_cast<uint32_t>(hi) << 8) | lo;
    if (len < 2 || len > remaining) return kStatusCorrupt;
    const uint32_t n = len - 2;
    const bool keep = SegmentIsParsed(m);
    if (keep && n > static_cast<uint32_t>(kSegMax)) return kStatusUnsupported;
  NEARPREP_SIM_LOOP("ParseHeader.segment")
  segment:
    for (uint32_t i = 0; i < n; ++i) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 2 max = 1024
      NEARPREP_SIM_ITER();
      uint8_t v = 0;
      NextByte(bytes, size, consumed, &v);
      if (keep) seg[i] = v;
    }
    ++*segments;
    const uint32_t s = ParseSegment(m, seg, n, hdr);
    NEARPREP_SIM_EVENT("ParseHeader.parse_segment", 1);
    NEARPREP_SIM_EVENT("ParseHeader.parse_segment_byte", keep ? n : 0);
    if (s != kStatusOk) return s;
    if (hdr->done) return kStatusOk;
  }
  return kStatusCorrupt;
}

}  // namespace

void ReadControl(const uint32_t* desc, const uint32_t* cfg, uint32_t num_images,
                 hls::stream<ImageJob, kJobDepth>& job_out) {
  uint32_t c[kCfgWords];
NEARPREP_SIM_EVENT("DDR.read_latency", 1);
NEARPREP_SIM_LOOP("ReadControl.cfg_copy")
cfg_copy:
  for (int i = 0; i < kCfgWords; ++i) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 24 max = 24
    NEARPREP_SIM_ITER();
    c[i] = cfg[i];
  }
  const uint64_t jpeg_bytes = U64(c[kCfgJpegBytesLo], c[kCfgJpegBytesHi]);
  const uint64_t out_bytes = U64(c[kCfgOutBytesLo], c[kCfgOutBytesHi]);
  // A host of another ABI version: its words mean something else.
  const bool abi_ok = c[kCfgAbiVersion] == kAbiVersion;
images:
  for (uint32_t i = 0; i < num_images; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 32
    uint32_t d[kDescWords];
    NEARPREP_SIM_EVENT("DDR.read_latency", 1);
  NEARPREP_SIM_LOOP("ReadControl.desc_copy")
  desc_copy:
    for (int k = 0; k < kDescWords; ++k) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 16 max = 16
      NEARPREP_SIM_ITER();
      d[k] = desc[static_cast<uint64_t>(i) * kDescWords + k];
    }
    ImageJob j = ImageJob();
    j.index = i;
    j.status = kStatusOk;
    j.out_h = static_cast<int>(c[kCfgOutHeight]);
    j.out_w = static_cast<int>(c[kCfgOutWidth]);
    j.dtype = static_cast<int>(c[kCfgDType]);
    j.layout = static_cast<int>(c[kCfgLayout]);
    j.clip = (c[kCfgFlags] & kCfgClip) != 0;
    j.normalize = (c[kCfgFlags] & kCfgNormalize) != 0;
    for (int k = 0; k < 3; ++k) {
      j.mean[k] = F32(c[kCfgMean0 + k]);
      j.std[k] = F32(c[kCfgStd0 + k]);
    }
    j.max_values = U64(c[kCfgMaxValuesLo], c[kCfgMaxValuesHi]);
    j.jpeg_off = U64(d[kDescJpegOffsetLo], d[kDescJpegOffsetHi]);
    j.jpeg_size = d[kDescJpegSize];
    j.out_off = U64(d[kDescOutOffsetLo], d[kDescOutOffsetHi]);
    j.flags = d[kDescFlags];
    j.delta = F32(d[kDescBrightness]);
    j.factor = F32(d[kDescSaturation]);
    j.crop_y = static_cast<int>(d[kDescCropY]);
    j.crop_x = static_cast<int>(d[kDescCropX]);
    j.crop_h = static_cast<int>(d[kDescCropH]);
    j.crop_w = static_cast<int>(d[kDescCropW]);
    // Output bytes as the host computes them (uint64 of the int fields).
    const uint64_t obytes = static_cast<uint64_t>(static_cast<int64_t>(j.out_h)) *
                            static_cast<uint64_t>(static_cast<int64_t>(j.out_w)) * 3 *
                            static_cast<uint64_t>(ElementBytes(j.dtype));
    // JPEG words are read whole: the buffer is allocated in 64-byte words.
    if (!abi_ok) {
      j.status = kStatusUnsupported;
    } else if (j.jpeg_off > jpeg_bytes || j.jpeg_size > jpeg_bytes - j.jpeg_off) {
      j.status = kStatusCorrupt;
    } else if (j.out_off > out_bytes || obytes > out_bytes - j.out_off ||
               ((j.out_off + obytes + 63) & ~uint64_t{63}) > ((out_bytes + 63) & ~uint64_t{63})) {
      // Output words are written whole: the last one must lie in the buffer,
      // which is allocated in whole 64-byte words.
      j.status = kStatusCorrupt;
    } else if (j.out_h <= 0 || j.out_w <= 0 || j.out_w > kMaxOutWidth || j.out_h > kMaxOutHeight ||
               j.dtype < 0 ||
               j.dtype > 3) {
      j.status = kStatusUnsupported;
    }
    job_out.write(j);
  }
}

void BurstRead(const WideWord* jpeg, uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
               hls::stream<ImageJob, kJobDepth>& job_out, hls::stream<uint8_t, kByteDepth>& bytes) {
  WideWord buf[kBurstWords];
images:
  for (uint32_t i = 0; i < num_images; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 32
    ImageJob j;
    if (!StartImage(job_in, job_out, &j)) continue;
    const uint64_t first_word = j.jpeg_off >> 6;
    const uint32_t skip = static_cast<uint32_t>(j.jpeg_off & 63);
    const uint64_t words = (static_cast<uint64_t>(skip) + j.jpeg_size + 63) >> 6;
    uint32_t emitted = 0;
  bursts:
    for (uint64_t w0 = 0; w0 < words; w0 += kBurstWords) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 32
      const uint32_t n = static_cast<uint32_t>(words - w0 < kBurstWords ? words - w0 : kBurstWords);
      NEARPREP_SIM_EVENT("DDR.read_latency", 1);
    NEARPREP_SIM_LOOP("BurstRead.burst")
    burst:
      for (uint32_t k = 0; k < n; ++k) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 64
        NEARPREP_SIM_ITER();
        buf[k] = jpeg[first_word + w0 + k];
      }
    NEARPREP_SIM_LOOP("BurstRead.split")
    split:
      for (uint32_t k = 0; k < n * 64; ++k) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 64 max = 4096
        NEARPREP_SIM_ITER();
        const bool lead = w0 == 0 && k < skip;
        if (!lead && emitted < j.jpeg_size) {
          bytes.write(WordByte(buf[k >> 6], static_cast<int>(k & 63)));
          ++emitted;
        }
      }
    }
  }
}

void ParseHeader(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                 hls::stream<uint8_t, kByteDepth>& bytes, hls::stream<ImageJob, kJobDepth>& job_out,
                 hls::stream<uint8_t, kByteDepth>& scan, hls::stream<uint8_t, kTableDepth>& tables,
                 hls::stream<int16_t, kQuantDepth>& quant) {
images:
  for (uint32_t i = 0; i < num_images; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 32
    ImageJob j = job_in.read();
    if (j.status != kStatusOk) {
      job_out.write(j);
      continue;
    }
    JpegHeader hdr = JpegHeader();
    uint32_t consumed = 0, segments = 0;
    uint32_t s = ParseMarkers(bytes, j.jpeg_size, &consumed, &hdr, &segments);
    const bool parsed = s == kStatusOk;  // the status record then has the size
    j.sampling = hdr.sampling;
    if (s == kStatusOk) {
      j.width = hdr.width;
      j.height = hdr.height;
      j.ncomp = hdr.ncomp;
      j.hmax = hdr.hmax;
      j.vmax = hdr.vmax;
      j.mcus_x = hdr.mcus_x;
      j.mcus_y = hdr.mcus_y;
      j.restart_interval = hdr.restart_interval;
      uint32_t per_mcu = 0;
      for (int c = 0; c < 3; ++c) {
        const bool have = c < hdr.ncomp;
        j.comp_h[c] = have ? (hdr.interleaved ? hdr.comp[c].h : 1) : 0;
        j.comp_v[c] = have ? (hdr.interleaved ? hdr.comp[c].v : 1) : 0;
        j.ds_w[c] = have ? hdr.comp[c].ds_w : 0;
        j.ds_h[c] = have ? hdr.comp[c].ds_h : 0;
        per_mcu += static_cast<uint32_t>(j.comp_h[c]) * j.comp_v[c];
      }
      j.blocks = per_mcu * static_cast<uint32_t>(hdr.mcus_x) * static_cast<uint32_t>(hdr.mcus_y);
      j.scan_bytes = j.jpeg_size - consumed;
      // On-chip MCU-row buffers: luma 1x1, 2x1 or 2x2 blocks per MCU and
      // 1x1 chroma (what encoders write); anything else goes to the CPU.
      if (hdr.ncomp == 3 &&
          (hdr.comp[1].h != 1 || hdr.comp[1].v != 1 || hdr.comp[2].h != 1 ||
           hdr.comp[2].v != 1 || hdr.comp[0].v > 2 || hdr.comp[0].h > 2 ||
           (hdr.comp[0].v == 2 && hdr.comp[0].h != 2))) {
        s = kStatusUnsupported;
      }
    }
    if (s == kStatusOk) {
      if (static_cast<uint64_t>(j.width) * j.height * 3 >= j.max_values || j.width > kMaxWidth) {
        s = kStatusTooLarge;
      } else if (j.flags & kFlagWholeImage) {
        j.crop_y = 0;
        j.crop_x = 0;
        j.crop_h = j.height;
        j.crop_w = j.width;
      } else if (j.crop_h <= 0 || j.crop_w <= 0 || j.crop_y < 0 || j.crop_x < 0 ||
                 j.crop_y > j.height - j.crop_h || j.crop_x > j.width - j.crop_w) {
        s = kStatusUnsupported;  // host computed a box for another size
      }
    }
    j.width = parsed ? hdr.width : 0;
    j.height = parsed ? hdr.height : 0;
    j.status = s;
    job_out.write(j);
    if (s != kStatusOk) {
    NEARPREP_SIM_LOOP("ParseHeader.drain")
    drain:
      for (; consumed < j.jpeg_size; ++consumed) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 0 max = 200000
        NEARPREP_SIM_ITER();
        bytes.read();
      }
      continue;
    }
    // Header bytes (one per iteration, one loop entry per segment), tables,
    // multipliers, then the scan's bytes.
    // Huffman tables of each component (DC then AC: 16 counts + 256 values).
  table_comps:
    for (int c = 0; c < j.ncomp; ++c) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 3
      for (int t = 0; t < 2; ++t) {
        const HuffSpec& h = t == 0 ? hdr.dc[hdr.comp[c].td] : hdr.ac[hdr.comp[c].ta];
      NEARPREP_SIM_LOOP("ParseHeader.table_bytes")
      table_bytes:
        for (int k = 0; k < 16 + 256; ++k) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 272 max = 272
          NEARPREP_SIM_ITER();
          tables.write(k < 16 ? h.bits[k + 1] : h.vals[k - 16]);
        }
      }
    }
    // IFAST multipliers of each component.
  quant_comps:
    for (int c = 0; c < j.ncomp; ++c) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 3
      int16_t qmul[64];
      IfastMultipliers(hdr.qt[hdr.comp[c].tq], qmul);
      NEARPREP_SIM_EVENT("ParseHeader.ifast_multipliers", 1);
    NEARPREP_SIM_LOOP("ParseHeader.quant_values")
    quant_values:
      for (int k = 0; k < 64; ++k) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 64 max = 64
        NEARPREP_SIM_ITER();
        quant.write(qmul[k]);
      }
    }
  NEARPREP_SIM_LOOP("ParseHeader.forward")
  forward:
    for (uint32_t k = 0; k < j.scan_bytes; ++k) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 1000 max = 200000
      NEARPREP_SIM_ITER();
      scan.write(bytes.read());
    }
  }
}

void Destuff(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
             hls::stream<uint8_t, kByteDepth>& scan, hls::stream<ImageJob, kJobDepth>& job_out,
             hls::stream<ScanToken, kTokenDepth>& tokens) {
images:
  for (uint32_t i = 0; i < num_images; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 32
    ImageJob j;
    if (!StartImage(job_in, job_out, &j)) continue;
    // 0: data; 1: after FF (fill bytes FF skipped); 2: after a marker that
    // is not RSTn: the scan is over, the rest is dropped.
    int state = 0;
  NEARPREP_SIM_LOOP("Destuff.bytes")
  bytes:
    for (uint32_t k = 0; k < j.scan_bytes; ++k) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 1000 max = 200000
      NEARPREP_SIM_ITER();
      const uint8_t b = scan.read();
      if (state == 0) {
        if (b == 0xFF) {
          state = 1;
        } else {
          tokens.write(static_cast<ScanToken>(kTokData | b));
        }
      } else if (state == 1) {
        if (b == 0x00) {  // FF 00 (after any fill FFs): a data FF
          tokens.write(static_cast<ScanToken>(kTokData | 0xFF));
          state = 0;
        } else if (b != 0xFF) {
          tokens.write(static_cast<ScanToken>(kTokMarker | b));
          state = (b >= 0xD0 && b <= 0xD7) ? 0 : 2;
        }
      }
    }
    // A trailing FF with nothing after it is no marker libjpeg could match:
    // the end token alone stands for it.
    tokens.write(kTokEnd);
  }
}

}  // namespace nearprep_fpga
