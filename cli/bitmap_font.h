// A tiny built-in 5x7 bitmap font for labels on contact sheets: digits,
// upper- and lower-case letters (class names such as "n01440764 tench"
// keep their case) and common punctuation.
// Characters it lacks are drawn as a hollow box.
//
// Thread-safety: the glyph table is constant; drawing touches only the
// image passed in.
#ifndef NEARPREP_CLIENT_CPP_SRC_BITMAP_FONT_H_
#define NEARPREP_CLIENT_CPP_SRC_BITMAP_FONT_H_

#include <array>
#include <cstdint>
#include <string_view>

#include "cli/tensor_image.h"

namespace nearprep {

inline constexpr int kGlyphWidth = 5;
inline constexpr int kGlyphHeight = 7;
// Horizontal advance per character, one column of spacing included.
inline constexpr int kGlyphAdvance = kGlyphWidth + 1;

// Row bitmaps, bit 4 = leftmost column. False for characters without glyph.
bool GlyphRows(char c, std::array<uint8_t, kGlyphHeight>* rows);

// Width in pixels of `text` drawn at `scale` (no trailing spacing).
int TextWidth(std::string_view text, int scale);

// Draws `text` with its top-left corner at (x, y), each font pixel a
// scale x scale square, clipped to the image. Stops at the right edge.
void DrawText(RgbImage* image, int x, int y, std::string_view text, int scale,
              const uint8_t rgb[3]);

}  // namespace nearprep

#endif  // NEARPREP_CLIENT_CPP_SRC_BITMAP_FONT_H_
