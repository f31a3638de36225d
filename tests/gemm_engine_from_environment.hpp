// Included by the nn test programs that ctest runs once per GEMM engine (tests/CMakeLists.txt:
// nn_ops_<engine>, nn_gpt_<engine>, with NANODIST_GEMM set): the engine is read here, where the
// program starts, and given to nn (nn::use_gemm_engine), as every program gives it.
#pragma once
#include <cstdlib>

#include "nn/gemm.hpp"

static const bool gemm_engine_chosen = (nn::use_gemm_engine(nn::parse_gemm_engine(std::getenv("NANODIST_GEMM"))), true);
