// torchvision 0.14's auto-augment ops (transforms/autoaugment.py) for
// FIDELITY_TORCHVISION: _apply_op on a PIL RGB image (through pil_ops.h,
// bit-exact with Pillow 9.4). The ops (AugmentOp, server/spec/types.h) and
// the tables (server/spec/augment_space.h) are shared with the epoch plan.
//
// Random choices (which op, which bin, the sign, the probabilities) are the
// caller's: this file only holds the tables and the deterministic op.
//
// Thread-safety: pure functions.
#ifndef NEARPREP_SERVER_IMAGE_TORCHVISION_AUGMENT_H_
#define NEARPREP_SERVER_IMAGE_TORCHVISION_AUGMENT_H_

#include <array>
#include <cstdint>
#include <vector>

#include "server/image/pil_ops.h"
#include "server/spec/augment_space.h"
#include "server/spec/types.h"

namespace nearprep {

// torchvision's op_name string ("ShearX", "Color", ...); "?" for a value
// outside the enum.
const char* AugmentOpName(AugmentOp op);

// torchvision 0.14's autoaugment._apply_op(img, op_name, magnitude,
// InterpolationMode.NEAREST, fill) on a PIL RGB image. `magnitude` is the
// value _apply_op receives: a float32 table entry (sign already applied), or
// for Posterize / Solarize the value passed (Posterize takes int(magnitude)).
// `fill` is the per-channel fill of the geometric ops (torchvision's None is
// {0, 0, 0}). Brightness / Color / Contrast / Sharpness use the factor
// float(1.0 + magnitude) (Python double, then Pillow's float).
void ApplyAugmentOp(pil::RgbImage* img, AugmentOp op, float magnitude,
                    const uint8_t fill[3]);

}  // namespace nearprep

#endif  // NEARPREP_SERVER_IMAGE_TORCHVISION_AUGMENT_H_
