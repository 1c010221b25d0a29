// The version every dgt binary prints for --version (dgt-run, dgt-rendezvous, dgt). CMake checks
// at configure time that it equals project(dgt VERSION ...) in the top CMakeLists.txt.
#ifndef DGT_COMMON_VERSION_H_
#define DGT_COMMON_VERSION_H_

namespace dgt {

inline constexpr char kVersion[] = "0.1.0";

}  // namespace dgt

#endif  // DGT_COMMON_VERSION_H_
