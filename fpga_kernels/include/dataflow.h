// dataflow.h: the processes of the nearprep_preprocess DATAFLOW network and
// the tokens that flow between them.
//
//   ReadControl -> BurstRead -> ParseHeader -> Destuff -> HuffmanDecode ->
//   AssembleBlocks -> Idct -> McuRowReceive => RasterEmit -> UpsampleColor ->
//   CropResize -> ResizeMath -> PackOutput -> PackWords -> BurstWrite ->
//   WriteStatus
//   (=>: streams of blocks - luma, Cb, Cr - two MCU-row buffers each,
//   handed over whole)
//
// Every process loops over the images of a run. An ImageJob travels down the
// chain; each process reads it at the start of an image and forwards it at
// once (never at the end: that would serialise the network), then moves that
// image's data. The per-image token counts on every stream are functions of
// the job alone once ParseHeader has filled it (bytes, blocks, rows,
// pixels), except three streams that carry an explicit end: the scan tokens
// (Destuff -> HuffmanDecode, ended by kTokEnd), the coefficient tokens (each
// block ended by a `last` token) and the output words (PackWords ->
// BurstWrite, each image's ended by an end token, and one more group after
// the last image: the run's last partial word). Error rules that keep the network live:
//  - a job whose status is not OK when it leaves ParseHeader carries no data
//    at all downstream: every process forwards it and moves on;
//  - an error found later (Huffman: corrupt stream; Idct: range guard) does
//    not shorten any stream: HuffmanDecode still emits exactly job.blocks
//    blocks (zero blocks after the error) and drains its input to kTokEnd,
//    and the verdict travels to WriteStatus on a side stream;
//  - every consumer reads exactly what its producer writes for the image.
// DDR is touched only by ReadControl (control words), BurstRead (512-bit
// words of the JPEG buffer), BurstWrite (512-bit words of the output buffer)
// and WriteStatus (the status record, after the image's last output word).
//
// Thread-safety: in C simulation each process runs on its own thread and
// shares nothing but its streams (hls_sim.h).
#ifndef NEARPREP_FPGA_KERNELS_DATAFLOW_H_
#define NEARPREP_FPGA_KERNELS_DATAFLOW_H_

#include <cstdint>

#include "hls_compat.h"
#include "jpeg_l1.h"
#include "nearprep_kernel_abi.h"

namespace nearprep_fpga {

// Widest output tensor (the crop/resize stage's precomputed column taps).
constexpr int kMaxOutWidth = 4096;
// Tallest output tensor (the crop/resize stage's precomputed row taps).
constexpr int kMaxOutHeight = 4096;
// Longest table/frame/scan segment ParseHeader keeps on chip; a longer one
// (legal but never written by encoders) makes the image UNSUPPORTED.
constexpr int kSegMax = 4096;
// Words per DDR burst of BurstRead / BurstWrite (64 x 512 bit = 4 KiB).
constexpr int kBurstWords = 64;

// Stream depths (the STREAM depth of each FIFO, in tokens).
constexpr int kJobDepth = 4;
constexpr int kByteDepth = 128;        // two 512-bit words of bytes
constexpr int kTableDepth = 2048;      // one image's Huffman tables (6 x 272)
constexpr int kQuantDepth = 256;       // one image's multipliers (3 x 64)
constexpr int kTokenDepth = 64;
constexpr int kBlockDepth = 4;
constexpr int kRowDepth = 32;          // 8-sample block rows
constexpr int kPixelDepth = 64;
constexpr int kStatusDepth = 8;
constexpr int kWordDepth = 128;        // two bursts of output words

struct ImageJob {
  uint32_t index;
  uint32_t status;  // OK, or why this image carries no data downstream
  // Descriptor.
  uint64_t jpeg_off;
  uint32_t jpeg_size;
  uint64_t out_off;
  uint32_t flags;
  float delta, factor;
  int crop_y, crop_x, crop_h, crop_w;
  // Run configuration.
  int out_h, out_w, dtype, layout;
  bool clip, normalize;
  float mean[3], std[3];
  uint64_t max_values;
  // Frame and scan (filled by ParseHeader).
  int width, height, ncomp, sampling, hmax, vmax, mcus_x, mcus_y;
  int restart_interval;
  uint8_t comp_h[3], comp_v[3];  // blocks per MCU of each component: h x v
  int ds_w[3], ds_h[3];
  uint32_t scan_bytes;  // bytes after the SOS segment, forwarded to Destuff
  uint32_t blocks;      // blocks of the scan
  bool out_rejected;    // BurstWrite: the slot overlaps an earlier image's
};

// Destuff -> HuffmanDecode: a data byte, a marker (after FF, not FF00), or
// the end of the image's bytes.
typedef uint16_t ScanToken;
constexpr uint16_t kTokData = 0x000;
constexpr uint16_t kTokMarker = 0x100;
constexpr uint16_t kTokEnd = 0x200;

// HuffmanDecode -> AssembleBlocks: one coefficient (or none: a block end
// without a value, EOB/ZRL), `last` on the block's final token.
struct CoefToken {
  int16_t value;
  uint8_t pos;  // natural-order index
  uint8_t comp;
  bool has_value;
  bool last;
};

struct Block {
  int16_t coef[64];  // natural order
  uint8_t comp;
};

struct SampleRow {  // one row of an 8x8 sample block
  uint8_t s[8];
};

// McuRowReceive => RasterEmit: one MCU row of samples in three streams of
// blocks - luma (16 sample rows), Cb and Cr (8 each) - of two blocks each
// (one filled while the other is emitted), stored as 8-sample words (one
// SampleRow per 64-bit word, sample x in bits 8*(x%8)..+7 of word x/8): the
// receiver writes one word per cycle into one plane, the emitter reads at
// most two words of each plane per cycle (true dual port). Widths in whole
// MCUs of the widest image.
constexpr int kMcuRowWidth = kMaxWidth + 16;
constexpr int kMcuRowWords = kMcuRowWidth / 8;
typedef uint64_t McuLumaBlock[16][kMcuRowWords];
typedef uint64_t McuChromaBlock[8][kMcuRowWords];
typedef hls::stream_of_blocks<McuLumaBlock> McuLumaStream;
typedef hls::stream_of_blocks<McuChromaBlock> McuChromaStream;

// RasterEmit -> UpsampleColor: the chroma samples one output row needs
// at one chroma column (4:2:x: the nearer and the farther row of libjpeg's
// fancy upsampling; 4:4:4: near only).
struct ChromaPair {
  uint8_t cb_near, cb_far, cr_near, cr_far;
};

struct Rgb {
  uint8_t c[3];
};

// CropResize -> ResizeMath: one output pixel's four source pixels (RGB
// packed in 24 bits, R in the low byte) and its two bilinear weights.
struct BilinearSample {
  uint32_t tl, tr, bl, br;
  float lx, ly;
};

struct PixelF {  // ResizeMath -> PackOutput
  float c[3];
};

// PackOutput -> BurstWrite: up to 12 bytes of one plane, in address order.
struct OutChunk {
  uint8_t b[12];
  uint8_t n;
  uint8_t plane;
};

// PackWords -> BurstWrite: one 512-bit output word and its word address,
// or the end of an image's words (and, after the last image, of the run's).
struct OutWord {
  WideWord w;
  uint64_t addr;
  bool end;
};

struct StageStatus {  // HuffmanDecode / Idct -> WriteStatus
  uint32_t status;
  uint32_t iterations;
};

// The start of an image in a process: reads its job, forwards it at once
// (never at the end of the image: that would serialise the network) and says
// whether the image carries data.
inline bool StartImage(hls::stream<ImageJob, kJobDepth>& in, hls::stream<ImageJob, kJobDepth>& out,
                       ImageJob* j) {
  *j = in.read();
  out.write(*j);
  return j->status == kStatusOk;
}

// Bytes per output element for a dtype (0 f32, 1 f16, 2 bf16, 3 u8).
inline int ElementBytes(int dtype) {
  return dtype == kDTypeF32 ? 4 : (dtype == kDTypeU8 ? 1 : 2);
}

void ReadControl(const uint32_t* desc, const uint32_t* cfg, uint32_t num_images,
                 hls::stream<ImageJob, kJobDepth>& job_out);
void BurstRead(const WideWord* jpeg, uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
               hls::stream<ImageJob, kJobDepth>& job_out, hls::stream<uint8_t, kByteDepth>& bytes);
void ParseHeader(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                 hls::stream<uint8_t, kByteDepth>& bytes, hls::stream<ImageJob, kJobDepth>& job_out,
                 hls::stream<uint8_t, kByteDepth>& scan, hls::stream<uint8_t, kTableDepth>& tables,
                 hls::stream<int16_t, kQuantDepth>& quant);
void Destuff(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
             hls::stream<uint8_t, kByteDepth>& scan, hls::stream<ImageJob, kJobDepth>& job_out,
             hls::stream<ScanToken, kTokenDepth>& tokens);
void HuffmanDecode(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                   hls::stream<uint8_t, kTableDepth>& tables,
                   hls::stream<ScanToken, kTokenDepth>& tokens,
                   hls::stream<ImageJob, kJobDepth>& job_out,
                   hls::stream<CoefToken, kTokenDepth>& coefs,
                   hls::stream<StageStatus, kStatusDepth>& status);
void AssembleBlocks(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                    hls::stream<CoefToken, kTokenDepth>& coefs,
                    hls::stream<ImageJob, kJobDepth>& job_out,
                    hls::stream<Block, kBlockDepth>& blocks);
void Idct(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
          hls::stream<int16_t, kQuantDepth>& quant, hls::stream<Block, kBlockDepth>& blocks,
          hls::stream<ImageJob, kJobDepth>& job_out, hls::stream<SampleRow, kRowDepth>& rows,
          hls::stream<StageStatus, kStatusDepth>& status);
void McuRowReceive(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                   hls::stream<SampleRow, kRowDepth>& rows,
                   hls::stream<ImageJob, kJobDepth>& job_out, McuLumaStream& luma_rows,
                   McuChromaStream& cb_rows, McuChromaStream& cr_rows);
// Emits the raster rows inside the crop box's rows (rows above and below it
// are dropped here: nothing downstream needs them).
void RasterEmit(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                McuLumaStream& luma_rows, McuChromaStream& cb_rows, McuChromaStream& cr_rows,
                hls::stream<ImageJob, kJobDepth>& job_out,
                hls::stream<uint8_t, kPixelDepth>& luma,
                hls::stream<ChromaPair, kPixelDepth>& chroma);
// Upsamples and converts the rows RasterEmit sends; sends only the crop
// box's pixels.
void UpsampleColor(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                   hls::stream<uint8_t, kPixelDepth>& luma,
                   hls::stream<ChromaPair, kPixelDepth>& chroma,
                   hls::stream<ImageJob, kJobDepth>& job_out, hls::stream<Rgb, kPixelDepth>& rgb);
// The decode network, ParseHeader ... UpsampleColor with the streams between
// them, as one nested DATAFLOW region: the kernel's top calls it as one
// process, the host helper DecodeJpegToRgb runs it alone (one definition of
// the network for both). In: jobs from BurstRead and the JPEG bytes; out:
// jobs, RGB pixels of the crop box, the Huffman and IDCT verdicts.
void DecodeToRgb(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                 hls::stream<uint8_t, kByteDepth>& jpeg_bytes,
                 hls::stream<ImageJob, kJobDepth>& job_out, hls::stream<Rgb, kPixelDepth>& rgb,
                 hls::stream<StageStatus, kStatusDepth>& huff_status,
                 hls::stream<StageStatus, kStatusDepth>& idct_status);
// The crop box's pixels into three line buffers; per output pixel its four
// source pixels and weights (integer work, one pixel per cycle).
void CropResize(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                hls::stream<Rgb, kPixelDepth>& rgb, hls::stream<ImageJob, kJobDepth>& job_out,
                hls::stream<BilinearSample, kPixelDepth>& samples);
// The float chain (bilinear blend, augment, clip, normalise): one flat loop
// per image, so its deep pipeline fills and drains once per image.
void ResizeMath(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                hls::stream<BilinearSample, kPixelDepth>& samples,
                hls::stream<ImageJob, kJobDepth>& job_out,
                hls::stream<PixelF, kPixelDepth>& pixels);
void PackOutput(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                hls::stream<PixelF, kPixelDepth>& pixels,
                hls::stream<ImageJob, kJobDepth>& job_out,
                hls::stream<OutChunk, kPixelDepth>& chunks);
// Output chunks into 512-bit words (one chunk per cycle), merging the words
// that adjacent slots and planes share; the words go to BurstWrite in the
// order they complete.
void PackWords(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
               hls::stream<OutChunk, kPixelDepth>& chunks,
               hls::stream<ImageJob, kJobDepth>& job_out, hls::stream<OutWord, kWordDepth>& words);
// Runs of consecutive word addresses written as bursts of up to kBurstWords.
void BurstWrite(WideWord* out, uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                hls::stream<OutWord, kWordDepth>& words,
                hls::stream<ImageJob, kJobDepth>& job_out);
void WriteStatus(uint32_t* status, uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                 hls::stream<StageStatus, kStatusDepth>& huffman,
                 hls::stream<StageStatus, kStatusDepth>& idct);

}  // namespace nearprep_fpga

#endif  // NEARPREP_FPGA_KERNELS_DATAFLOW_H_
