// Sanitizer build only: a GEMM whose A is one float short. The kernels run uninstrumented
// (nn/eigen_gemm_kernel.hpp), so nn::gemm's own span check must catch it: ctest expects
// AddressSanitizer's heap-buffer-overflow report after gemm's line naming the matrix.
#include <vector>

#include "nn/gemm.hpp"

int main() {
  const int64_t M = 4, N = 3, K = 8;
  std::vector<float> a(M * K - 1, 1.0f), b(K * N, 1.0f), c(M * N, 0.0f);
  nn::gemm(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N);
  return 0;
}
