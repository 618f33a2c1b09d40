// cpp_model.cpp - a C++ program on the installed C API (fixformer.h declares
// it extern "C"): opens a description, binds its weights, runs one forward
// pass with the runtime engine, prints the argmax per position and writes
// the output as .npy, as examples/jit_model.c does in C.
//   cpp_model MODEL.lua W.safetensors OUT.npy ID [ID ...]
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "fixformer.h"

int main(int argc, char **argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: cpp_model MODEL.lua W.safetensors OUT.npy ID [ID ...]\n");
    return 2;
  }
  std::vector<int32_t> ids;
  for (int i = 4; i < argc; i++) ids.push_back(static_cast<int32_t>(std::atoi(argv[i])));
  ff_error err = {0, ""};
  std::unique_ptr<ff_model, void (*)(ff_model *)> m(ff_model_open(argv[1], &err), ff_model_close);
  if (!m || ff_model_load_weights(m.get(), argv[2], &err) || ff_model_prepare(m.get(), FF_ENGINE_RUNTIME, &err)) {
    std::fprintf(stderr, "cpp_model: %s\n", err.msg);
    return 1;
  }
  const int T = static_cast<int>(ids.size()), dim = ff_config_out_dim(ff_model_config(m.get()));
  std::vector<float> out(static_cast<size_t>(T) * dim);
  ff_input in = {};
  in.batch = 1;
  in.src_len = T;
  in.src_tokens = ids.data();
  ff_array a = {FF_F32, 3, {1, T, dim}, out.size(), out.data()};
  if (ff_model_forward(m.get(), &in, out.data(), &err) || ff_npy_write(argv[3], &a, &err)) {
    std::fprintf(stderr, "cpp_model: %s\n", err.msg);
    return 1;
  }
  std::printf("argmax:");
  for (int t = 0; t < T; t++) {
    const float *row = &out[static_cast<size_t>(t) * dim];
    int best = 0;
    for (int v = 1; v < dim; v++)
      if (row[v] > row[best]) best = v;
    std::printf(" %d", best);
  }
  std::printf("\n");
  return 0;
}
