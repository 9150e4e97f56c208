// L2: the nearprep_preprocess kernel, one DATAFLOW region of the processes
// in dataflow.h; the decode processes (ParseHeader ... UpsampleColor) form a
// nested DATAFLOW region of their own, DecodeToRgb, which the kernel calls as
// one process and the host helper DecodeJpegToRgb (host/decode_to_rgb.cc)
// runs alone - one definition of the decode network for both. All DDR
// traffic is in ReadControl (control words), BurstRead / BurstWrite (512-bit
// bursts of the JPEG and tensor buffers) and WriteStatus; between them every
// image moves through on-chip FIFOs and buffers (no DDR scratch). The
// processes loop over the images of the run, so consecutive images overlap
// in the network.
#include "nearprep_kernel.h"

#include "dataflow.h"
#include "hls_compat.h"
#include "nearprep_kernel_abi.h"

namespace nearprep_fpga {

void DecodeToRgb(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                 hls::stream<uint8_t, kByteDepth>& jpeg_bytes,
                 hls::stream<ImageJob, kJobDepth>& job_out, hls::stream<Rgb, kPixelDepth>& rgb,
                 hls::stream<StageStatus, kStatusDepth>& huff_status,
                 hls::stream<StageStatus, kStatusDepth>& idct_status) {
#pragma HLS DATAFLOW
  hls::stream<ImageJob, kJobDepth> j_destuff("j_destuff"), j_huff("j_huff"),
      j_assemble("j_assemble"), j_idct("j_idct"), j_raster("j_raster"), j_emit("j_emit"),
      j_upsample("j_upsample");
  hls::stream<uint8_t, kByteDepth> scan_bytes("scan_bytes");
  hls::stream<uint8_t, kTableDepth> tables("tables");
  hls::stream<int16_t, kQuantDepth> quant("quant");
  hls::stream<ScanToken, kTokenDepth> tokens("tokens");
  hls::stream<CoefToken, kTokenDepth> coefs("coefs");
  hls::stream<Block, kBlockDepth> blocks("blocks");
  hls::stream<SampleRow, kRowDepth> rows("rows");
  McuLumaStream luma_rows("luma_rows");
  McuChromaStream cb_rows("cb_rows"), cr_rows("cr_rows");
  hls::stream<uint8_t, kPixelDepth> luma("luma");
  hls::stream<ChromaPair, kPixelDepth> chroma("chroma");
  // FIFO depths (the template argument; restated for the reports).
#pragma HLS STREAM variable = j_destuff depth = kJobDepth
#pragma HLS STREAM variable = j_huff depth = kJobDepth
#pragma HLS STREAM variable = j_assemble depth = kJobDepth
#pragma HLS STREAM variable = j_idct depth = kJobDepth
#pragma HLS STREAM variable = j_raster depth = kJobDepth
#pragma HLS STREAM variable = j_emit depth = kJobDepth
#pragma HLS STREAM variable = j_upsample depth = kJobDepth
#pragma HLS STREAM variable = scan_bytes depth = kByteDepth
#pragma HLS STREAM variable = tables depth = kTableDepth
#pragma HLS STREAM variable = quant depth = kQuantDepth
#pragma HLS STREAM variable = tokens depth = kTokenDepth
#pragma HLS STREAM variable = coefs depth = kTokenDepth
#pragma HLS STREAM variable = blocks depth = kBlockDepth
#pragma HLS STREAM variable = rows depth = kRowDepth
#pragma HLS STREAM variable = luma depth = kPixelDepth
#pragma HLS STREAM variable = chroma depth = kPixelDepth
  NEARPREP_DATAFLOW_BEGIN("decode_to_rgb");
  NEARPREP_PROCESS(
      ParseHeader(num_images, job_in, jpeg_bytes, j_destuff, scan_bytes, tables, quant));
  NEARPREP_PROCESS(Destuff(num_images, j_destuff, scan_bytes, j_huff, tokens));
  NEARPREP_PROCESS(
      HuffmanDecode(num_images, j_huff, tables, tokens, j_assemble, coefs, huff_status));
  NEARPREP_PROCESS(AssembleBlocks(num_images, j_assemble, coefs, j_idct, blocks));
  NEARPREP_PROCESS(Idct(num_images, j_idct, quant, blocks, j_raster, rows, idct_status));
  NEARPREP_PROCESS(
      McuRowReceive(num_images, j_raster, rows, j_emit, luma_rows, cb_rows, cr_rows));
  NEARPREP_PROCESS(
      RasterEmit(num_images, j_emit, luma_rows, cb_rows, cr_rows, j_upsample, luma, chroma));
  NEARPREP_PROCESS(UpsampleColor(num_images, j_upsample, luma, chroma, job_out, rgb));
  NEARPREP_DATAFLOW_END();
}

}  // namespace nearprep_fpga

extern "C" void nearprep_preprocess(const WideWord* jpeg, const uint32_t* desc,
                                    const uint32_t* cfg, WideWord* out, uint32_t* status,
                                    uint32_t num_images) {
#pragma HLS INTERFACE m_axi port = jpeg offset = slave bundle = gmem0 max_read_burst_length = 64 num_read_outstanding = 8 depth = 4096
#pragma HLS INTERFACE m_axi port = desc offset = slave bundle = gmem1 depth = 512
#pragma HLS INTERFACE m_axi port = cfg offset = slave bundle = gmem1 depth = 24
#pragma HLS INTERFACE m_axi port = out offset = slave bundle = gmem2 max_write_burst_length = 64 num_write_outstanding = 8 depth = 4096
#pragma HLS INTERFACE m_axi port = status offset = slave bundle = gmem1 depth = 256
#pragma HLS INTERFACE s_axilite port = jpeg
#pragma HLS INTERFACE s_axilite port = desc
#pragma HLS INTERFACE s_axilite port = cfg
#pragma HLS INTERFACE s_axilite port = out
#pragma HLS INTERFACE s_axilite port = status
#pragma HLS INTERFACE s_axilite port = num_images
#pragma HLS INTERFACE ap_ctrl_chain port = return
#pragma HLS DATAFLOW
  using namespace nearprep_fpga;
  hls::stream<ImageJob, kJobDepth> j_read("j_read"), j_header("j_header"), j_resize("j_resize"),
      j_math("j_math"), j_pack("j_pack"), j_words("j_words"), j_write("j_write"),
      j_status("j_status");
  hls::stream<uint8_t, kByteDepth> jpeg_bytes("jpeg_bytes");
  hls::stream<Rgb, kPixelDepth> rgb("rgb");
  hls::stream<BilinearSample, kPixelDepth> samples("samples");
  hls::stream<PixelF, kPixelDepth> pixels("pixels");
  hls::stream<OutChunk, kPixelDepth> chunks("chunks");
  hls::stream<OutWord, kWordDepth> words("words");
  hls::stream<StageStatus, kStatusDepth> huff_status("huff_status"), idct_status("idct_status");
  // FIFO depths (the template argument; restated for the reports).
#pragma HLS STREAM variable = j_read depth = kJobDepth
#pragma HLS STREAM variable = j_header depth = kJobDepth
#pragma HLS STREAM variable = j_resize depth = kJobDepth
#pragma HLS STREAM variable = j_math depth = kJobDepth
#pragma HLS STREAM variable = j_pack depth = kJobDepth
#pragma HLS STREAM variable = j_words depth = kJobDepth
#pragma HLS STREAM variable = j_write depth = kJobDepth
#pragma HLS STREAM variable = j_status depth = kJobDepth
#pragma HLS STREAM variable = jpeg_bytes depth = kByteDepth
#pragma HLS STREAM variable = rgb depth = kPixelDepth
#pragma HLS STREAM variable = samples depth = kPixelDepth
#pragma HLS STREAM variable = pixels depth = kPixelDepth
#pragma HLS STREAM variable = chunks depth = kPixelDepth
#pragma HLS STREAM variable = words depth = kWordDepth
#pragma HLS STREAM variable = huff_status depth = kStatusDepth
#pragma HLS STREAM variable = idct_status depth = kStatusDepth
  NEARPREP_DATAFLOW_BEGIN("nearprep_preprocess");
  NEARPREP_PROCESS(ReadControl(desc, cfg, num_images, j_read));
  NEARPREP_PROCESS(BurstRead(jpeg, num_images, j_read, j_header, jpeg_bytes));
  NEARPREP_PROCESS(
      DecodeToRgb(num_images, j_header, jpeg_bytes, j_resize, rgb, huff_status, idct_status));
  NEARPREP_PROCESS(CropResize(num_images, j_resize, rgb, j_math, samples));
  NEARPREP_PROCESS(ResizeMath(num_images, j_math, samples, j_pack, pixels));
  NEARPREP_PROCESS(PackOutput(num_images, j_pack, pixels, j_words, chunks));
  NEARPREP_PROCESS(PackWords(num_images, j_words, chunks, j_write, words));
  NEARPREP_PROCESS(BurstWrite(out, num_images, j_write, words, j_status));
  NEARPREP_PROCESS(WriteStatus(status, num_images, j_status, huff_status, idct_status));
  NEARPREP_DATAFLOW_END();
}
