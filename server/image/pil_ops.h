// Pillow 9.4's colour and geometry operations on 8-bit RGB images, bit for bit
// as torchvision 0.14's transforms.functional applies them to a PIL "RGB"
// image (functional_pil.py -> ImageEnhance / ImageOps / Image.rotate /
// Image.transform). These are the primitives of torchvision's auto-augment
// ops (torchvision_augment.h) in FIDELITY_TORCHVISION mode.
//
// Arithmetic follows the libraries' own types: Pillow's C code takes blend
// factors as float (Blend.c), filter kernels as float (Filter.c), affine
// matrices as double (Geometry.c); the matrices themselves come from
// Python doubles (torchvision's _get_inverse_affine_matrix, Image.rotate).
// Compile with -ffp-contract=off (as nearprep_image does): a fused
// multiply-add would change results that Pillow's build computes unfused.
//
// Thread-safety: pure functions on caller-owned images; no shared state.
#ifndef NEARPREP_SERVER_IMAGE_PIL_OPS_H_
#define NEARPREP_SERVER_IMAGE_PIL_OPS_H_

#include <cstdint>
#include <vector>

namespace nearprep {
namespace pil {

// An 8-bit RGB image as PIL's "RGB" mode holds it: rows of width*3 bytes,
// contiguous. Every function below requires data.size() == height * width * 3
// (not checked) and keeps height and width; empty images are fine.
struct RgbImage {
  int height = 0, width = 0;
  std::vector<uint8_t> data;
};

// --- ImageEnhance (each is Image.blend(degenerate, image, factor)) ---------
// Blend.c: factor == 0 gives the degenerate image, 1 the image; in [0, 1]
// out = (uint8)(in1 + factor * (in2 - in1)) in float; outside [0, 1] the
// same float value clipped to [0, 255] then truncated. The factor is the
// float that Pillow's C code receives (Python's double cast to float).

// ImageEnhance.Brightness: degenerate = black.
void AdjustBrightness(RgbImage* img, float factor);
// ImageEnhance.Contrast: degenerate = grey int(mean(L) + 0.5) on all three
// channels, mean over the "L" conversion (ITU-R 601 24-bit fixed point).
void AdjustContrast(RgbImage* img, float factor);
// ImageEnhance.Color: degenerate = the "L" conversion copied to R, G, B.
void AdjustSaturation(RgbImage* img, float factor);
// ImageEnhance.Sharpness: degenerate = ImageFilter.SMOOTH (3x3 kernel
// 1 1 1 / 1 5 1 / 1 1 1, divisor 13) whose first/last rows and columns are
// the input's own pixels; images under 3x3 are not filtered at all (so the
// op is the identity there).
void AdjustSharpness(RgbImage* img, float factor);

// torchvision F_pil.adjust_hue: RGB -> PIL HSV (Convert.c rgb2hsv), H plus
// numpy.uint8(hue_factor * 255) mod 256, HSV -> RGB (Convert.c hsv2rgb).
// numpy 1.24's uint8 of a negative double truncates toward zero and wraps
// (-127.5 -> 129). hue_factor is torchvision's Python float, in [-0.5, 0.5]
// (not checked here).
void AdjustHue(RgbImage* img, double hue_factor);

// --- ImageOps (look-up tables, applied per channel) ------------------------
// ImageOps.posterize: keeps the top `bits` bits (0..8; 0 gives black).
// torchvision raises outside 0..8; here bits is clamped to that range.
void Posterize(RgbImage* img, int bits);
// ImageOps.solarize: values v >= threshold become 255 - v (compared as
// Python compares int with float).
void Solarize(RgbImage* img, double threshold);
// ImageOps.autocontrast(cutoff=0): per channel, [lo, hi] -> [0, 255] with
// int(v * scale + offset) in double, clipped; lo >= hi leaves the channel.
void AutoContrast(RgbImage* img);
// ImageOps.equalize: per channel histogram LUT, Pillow's integer steps.
void Equalize(RgbImage* img);
// ImageOps.invert: 255 - v.
void Invert(RgbImage* img);

// --- Geometry (Geometry.c) -------------------------------------------------
// Image.transpose(FLIP_LEFT_RIGHT).
void FlipLeftRight(RgbImage* img);

// Image.transform(size, AFFINE, matrix, NEAREST, fillcolor=fill): output
// pixel (x, y) takes the input pixel at matrix * (x + 0.5, y + 0.5), pixels
// mapped outside the input get `fill`. Follows Pillow's three paths exactly:
// a pure scale/translation (matrix[1] == matrix[3] == 0) with per-axis
// double accumulation, 16.16 fixed point when the corners map within
// +-32768, and double accumulation otherwise.
void TransformAffine(RgbImage* img, const double matrix[6],
                     const uint8_t fill[3]);

// torchvision 0.14 F.affine on a PIL image with NEAREST: the inverse matrix
// of _get_inverse_affine_matrix (Python doubles, math.radians/cos/sin/tan),
// then TransformAffine. `center` null means torchvision's default
// (width * 0.5, height * 0.5); translate is the integer pair torchvision
// passes; scale must be > 0 (torchvision raises otherwise).
void Affine(RgbImage* img, double angle, const int translate[2], double scale,
            const double shear[2], const double* center, const uint8_t fill[3]);

// torchvision 0.14 F.rotate on a PIL image: Image.rotate(angle, NEAREST,
// expand=False, center=None, fillcolor=fill). angle % 360 of 0, 180 and (for
// square images) 90 / 270 are Pillow's exact transposes; other angles use
// the matrix of cos/sin rounded to 15 decimals, as Image.rotate builds it.
void Rotate(RgbImage* img, double angle_degrees, const uint8_t fill[3]);

}  // namespace pil
}  // namespace nearprep

#endif  // NEARPREP_SERVER_IMAGE_PIL_OPS_H_
