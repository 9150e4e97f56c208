// One sample, end to end on the CPU: encoded JPEG bytes -> finished tensor
// slot. decode -> to float -> crop+resize -> flip -> gamma -> brightness ->
// contrast -> saturation -> hue -> clip -> normalize -> pack (each colour op
// only when requested), with TF_COMPAT or FAST fidelity;
// FIDELITY_TORCHVISION goes to torchvision_preprocess.h.
//
// Thread-safety: reentrant; scratch memory is per call (or thread-local).
#ifndef NEARPREP_SERVER_IMAGE_PREPROCESS_H_
#define NEARPREP_SERVER_IMAGE_PREPROCESS_H_

#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/image/jpeg_decoder.h"
#include "server/spec/types.h"

namespace nearprep {

// Draws a sample's parameters once its decoded size (height, width) is known
// (the crop box depends on it). Supplied by the caller so that this module
// knows nothing about seeds or epochs.
using ParamsFn = std::function<SampleParams(int height, int width)>;

// True when `crop` is non-empty and lies inside an h x w image.
bool CropBoxInside(const CropBox& crop, int h, int w);

// Writes OutputSpec::SampleBytes(spec) bytes at `out`. On error `out` is left
// unspecified and the status says why (see jpeg_decoder.h for the codes).
// `params` receives the parameters used; `times` the decode/transform split.
absl::Status PreprocessJpeg(const uint8_t* data, size_t size,
                            const TransformSpec& spec, const OutputSpec& output,
                            const DecodeLimits& limits,
                            const ParamsFn& draw_params, SampleParams* params,
                            uint8_t* out, StageTimes* times);

// Decode once, transform many times (the CPU backend's decoded-image cache,
// server/data/decoded_cache.h).
//
// Whether `fidelity`'s output can be computed from a full decode kept from
// an earlier sample, and in which JpegStyle that decode is made:
// TF_COMPAT: kTensorFlow (its region decodes give the full decode's pixels,
// jpeg_session.h); TORCHVISION: kPil (likewise). FAST: no (it decodes at a
// reduced DCT scale and stops after the crop: other pixels).
bool ReusableDecode(Fidelity fidelity, JpegStyle* style);

// The full decode PreprocessJpeg's own fallback makes for `fidelity`
// (DecodeJpegTfCompat or DecodeJpegPil), for reuse. FAILED_PRECONDITION when
// it must not be reused: FAST, or damaged data (any libjpeg warning: the
// region decodes then take their own fallback, and the cache stays out of
// that logic); other errors are the decode's.
absl::StatusOr<RgbImage> DecodeForReuse(const uint8_t* data, size_t size,
                                        Fidelity fidelity,
                                        const DecodeLimits& limits);

// DecodeForReuse into memory the caller provides, with no zero fill and no
// copy: after the header, `allocate(height, width)` returns height*width*3
// writable bytes (every one is then written), or null to decode nothing
// (FAILED_PRECONDITION; e.g. the cache would not admit the image: the caller
// then takes PreprocessJpeg's own path). *height and *width are the image's.
// The same pixels and errors as DecodeForReuse.
absl::Status DecodeForReuseInto(
    const uint8_t* data, size_t size, Fidelity fidelity,
    const DecodeLimits& limits,
    const std::function<uint8_t*(int height, int width)>& allocate,
    int* height, int* width);

// PreprocessJpeg on the image DecodeForReuse returned for the same bytes,
// limits and fidelity: the same output bytes, params and errors (the crop is
// taken from the full image; tests/unit/backend/decoded_cache_test.cc
// compares byte for byte). times->decode_us is 0.
absl::Status PreprocessDecoded(const uint8_t* rgb, int height, int width,
                               const TransformSpec& spec,
                               const OutputSpec& output,
                               const ParamsFn& draw_params,
                               SampleParams* params, uint8_t* out,
                               StageTimes* times);

// The float part alone, on an already decoded RGB image. No backend calls it
// (they all go through PreprocessJpeg); tests use it to check that the fused
// decode-and-transform path equals decoding first and transforming after.
// With spec.fidelity == kFast, saturation uses the closed form (equal to
// TF_COMPAT up to float rounding); otherwise the result is TF-exact.
void TransformDecoded(const uint8_t* rgb, int height, int width,
                      const TransformSpec& spec, const OutputSpec& output,
                      const SampleParams& params, uint8_t* out);

}  // namespace nearprep

#endif  // NEARPREP_SERVER_IMAGE_PREPROCESS_H_
