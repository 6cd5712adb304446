// bf16 and f16 <-> float conversions on the host, round to nearest even.
#pragma once

#include <cstdint>
#include <cstring>

namespace seqmix::core {

inline float bf16_to_float(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float f16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t u;
  if (exponent == 0x1f) {
    u = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    u = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    u = sign;
  } else {  // subnormal half: normalise into a float
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    u = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;          // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;         // rounds to infinity
  if (abs < 0x38800000u) {                               // subnormal or zero in half
    if (abs < 0x33000000u) return sign;                  // below half the smallest subnormal
    uint32_t exponent = abs >> 23;
    uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exponent;                     // 14..24
    uint32_t half = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);  // round the 13 dropped bits to even
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
}

}  // namespace seqmix::core
