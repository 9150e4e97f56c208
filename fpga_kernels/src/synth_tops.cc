// synth_tops.cc: extern "C" synthesis entry points, one per dataflow process
// (issue 33 item 5), for the per-process csynth runs of first_vitis_hour.sh.
// Not part of the kernel v++ builds (the Makefile lists it in SYNTH_TOPS, not
// SRCS); compiled by the C simulation and by kernel_checks.py `ir` / `lint`.
//
// Why wrappers: vitis_hls `set_top` takes a function name, and the
// processes are C++ functions in namespace nearprep_fpga (mangled names a
// top lookup may not find); each wrapper has a plain C name and only calls
// its process. McuRowReceive and RasterEmit exchange hls::stream_of_blocks,
// which cannot be a top's port: they are synthesised together, as the one
// DATAFLOW top synth_McuRows with the blocks inside it. Ports: hls::stream
// arguments become AXI4-Stream / FIFO ports of the standalone top, pointers
// m_axi (the interfaces matter only for these csynth runs: the kernel's own
// interfaces are in preprocess_kernel.cc).
#include <cstdint>

#include "dataflow.h"
#include "hls_compat.h"

using nearprep_fpga::BilinearSample;
using nearprep_fpga::Block;
using nearprep_fpga::kBlockDepth;
using nearprep_fpga::kByteDepth;
using nearprep_fpga::kQuantDepth;
using nearprep_fpga::PixelF;
using nearprep_fpga::ChromaPair;
using nearprep_fpga::CoefToken;
using nearprep_fpga::ImageJob;
using nearprep_fpga::kJobDepth;
using nearprep_fpga::kPixelDepth;
using nearprep_fpga::kRowDepth;
using nearprep_fpga::kTableDepth;
using nearprep_fpga::kTokenDepth;
using nearprep_fpga::kStatusDepth;
using nearprep_fpga::kWordDepth;
using nearprep_fpga::McuChromaStream;
using nearprep_fpga::McuLumaStream;
using nearprep_fpga::OutChunk;
using nearprep_fpga::OutWord;
using nearprep_fpga::Rgb;
using nearprep_fpga::SampleRow;
using nearprep_fpga::ScanToken;
using nearprep_fpga::StageStatus;

// The three processes first_vitis_hour.sh synthesises first (the loops the
// timing table is least sure of).
extern "C" void synth_HuffmanDecode(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                                    hls::stream<uint8_t, kTableDepth>& tables,
                                    hls::stream<ScanToken, kTokenDepth>& tokens,
                                    hls::stream<ImageJob, kJobDepth>& job_out,
                                    hls::stream<CoefToken, kTokenDepth>& coefs,
                                    hls::stream<StageStatus, kStatusDepth>& status) {
  nearprep_fpga::HuffmanDecode(num_images, job_in, tables, tokens, job_out, coefs, status);
}

extern "C" void synth_PackWords(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                                hls::stream<OutChunk, kPixelDepth>& chunks,
                                hls::stream<ImageJob, kJobDepth>& job_out,
                                hls::stream<OutWord, kWordDepth>& words) {
  nearprep_fpga::PackWords(num_images, job_in, chunks, job_out, words);
}

extern "C" void synth_CropResize(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                                 hls::stream<Rgb, kPixelDepth>& rgb,
                                 hls::stream<ImageJob, kJobDepth>& job_out,
                                 hls::stream<BilinearSample, kPixelDepth>& samples) {
  nearprep_fpga::CropResize(num_images, job_in, rgb, job_out, samples);
}

// McuRowReceive + RasterEmit: one DATAFLOW top, the stream-of-blocks
// buffers between them inside.
extern "C" void synth_McuRows(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                              hls::stream<SampleRow, kRowDepth>& rows,
                              hls::stream<ImageJob, kJobDepth>& job_out,
                              hls::stream<uint8_t, kPixelDepth>& luma,
                              hls::stream<ChromaPair, kPixelDepth>& chroma) {
#pragma HLS DATAFLOW
  hls::stream<ImageJob, kJobDepth> j_emit("j_emit");
  McuLumaStream luma_rows("luma_rows");
  McuChromaStream cb_rows("cb_rows"), cr_rows("cr_rows");
#pragma HLS STREAM variable = j_emit depth = kJobDepth
  NEARPREP_DATAFLOW_BEGIN("synth_McuRows");
  NEARPREP_PROCESS(nearprep_fpga::McuRowReceive(num_images, job_in, rows, j_emit, luma_rows,
                                                cb_rows, cr_rows));
  NEARPREP_PROCESS(nearprep_fpga::RasterEmit(num_images, j_emit, luma_rows, cb_rows, cr_rows,
                                             job_out, luma, chroma));
  NEARPREP_DATAFLOW_END();
}

// The other processes, each alone (step 1b of first_vitis_hour.sh).
extern "C" void synth_ReadControl(const uint32_t* desc, const uint32_t* cfg, uint32_t num_images,
                                  hls::stream<ImageJob, kJobDepth>& job_out) {
  nearprep_fpga::ReadControl(desc, cfg, num_images, job_out);
}

extern "C" void synth_BurstRead(const WideWord* jpeg, uint32_t num_images,
                                hls::stream<ImageJob, kJobDepth>& job_in,
                                hls::stream<ImageJob, kJobDepth>& job_out,
                                hls::stream<uint8_t, kByteDepth>& bytes) {
  nearprep_fpga::BurstRead(jpeg, num_images, job_in, job_out, bytes);
}

extern "C" void synth_ParseHeader(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                                  hls::stream<uint8_t, kByteDepth>& bytes,
                                  hls::stream<ImageJob, kJobDepth>& job_out,
                                  hls::stream<uint8_t, kByteDepth>& scan,
                                  hls::stream<uint8_t, kTableDepth>& tables,
                                  hls::stream<int16_t, kQuantDepth>& quant) {
  nearprep_fpga::ParseHeader(num_images, job_in, bytes, job_out, scan, tables, quant);
}

extern "C" void synth_Destuff(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                              hls::stream<uint8_t, kByteDepth>& scan,
                              hls::stream<ImageJob, kJobDepth>& job_out,
                              hls::stream<ScanToken, kTokenDepth>& tokens) {
  nearprep_fpga::Destuff(num_images, job_in, scan, job_out, tokens);
}

extern "C" void synth_AssembleBlocks(uint32_t num_images,
                                     hls::stream<ImageJob, kJobDepth>& job_in,
                                     hls::stream<CoefToken, kTokenDepth>& coefs,
                                     hls::stream<ImageJob, kJobDepth>& job_out,
                                     hls::stream<Block, kBlockDepth>& blocks) {
  nearprep_fpga::AssembleBlocks(num_images, job_in, coefs, job_out, blocks);
}

extern "C" void synth_Idct(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                           hls::stream<int16_t, kQuantDepth>& quant,
                           hls::stream<Block, kBlockDepth>& blocks,
                           hls::stream<ImageJob, kJobDepth>& job_out,
                           hls::stream<SampleRow, kRowDepth>& rows,
                           hls::stream<StageStatus, kStatusDepth>& status) {
  nearprep_fpga::Idct(num_images, job_in, quant, blocks, job_out, rows, status);
}

extern "C" void synth_UpsampleColor(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                                    hls::stream<uint8_t, kPixelDepth>& luma,
                                    hls::stream<ChromaPair, kPixelDepth>& chroma,
                                    hls::stream<ImageJob, kJobDepth>& job_out,
                                    hls::stream<Rgb, kPixelDepth>& rgb) {
  nearprep_fpga::UpsampleColor(num_images, job_in, luma, chroma, job_out, rgb);
}

extern "C" void synth_ResizeMath(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                                 hls::stream<BilinearSample, kPixelDepth>& samples,
                                 hls::stream<ImageJob, kJobDepth>& job_out,
                                 hls::stream<PixelF, kPixelDepth>& pixels) {
  nearprep_fpga::ResizeMath(num_images, job_in, samples, job_out, pixels);
}

extern "C" void synth_PackOutput(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                                 hls::stream<PixelF, kPixelDepth>& pixels,
                                 hls::stream<ImageJob, kJobDepth>& job_out,
                                 hls::stream<OutChunk, kPixelDepth>& chunks) {
  nearprep_fpga::PackOutput(num_images, job_in, pixels, job_out, chunks);
}

extern "C" void synth_BurstWrite(WideWord* out, uint32_t num_images,
                                 hls::stream<ImageJob, kJobDepth>& job_in,
                                 hls::stream<OutWord, kWordDepth>& words,
                                 hls::stream<ImageJob, kJobDepth>& job_out) {
  nearprep_fpga::BurstWrite(out, num_images, job_in, words, job_out);
}

extern "C" void synth_WriteStatus(uint32_t* status, uint32_t num_images,
                                  hls::stream<ImageJob, kJobDepth>& job_in,
                                  hls::stream<StageStatus, kStatusDepth>& huffman,
                                  hls::stream<StageStatus, kStatusDepth>& idct) {
  nearprep_fpga::WriteStatus(status, num_images, job_in, huffman, idct);
}
