// Reading safetensors files (https://github.com/huggingface/safetensors):
// an 8-byte little-endian header length N, N bytes of JSON (tensor name ->
// {"dtype", "shape", "data_offsets": [begin, end)} relative to the data
// section, plus an optional "__metadata__"), then the data. A SafetensorsSet
// is one file or a Hugging Face `*.safetensors.index.json` ("weight_map":
// tensor name -> shard file in the index's directory). Headers are validated
// whole when opened (dtype, shape, offsets inside the file, no overflow);
// values are read by element range with pread in bounded chunks, so a reader
// touches only the bytes it asks for.
#ifndef ZERO_CORE_CKPT_SAFETENSORS_READER_H_
#define ZERO_CORE_CKPT_SAFETENSORS_READER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zero {
namespace ckpt {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;           // as in the file: "F32", "BF16", "I64", ...
  int64_t element_size = 0;    // bytes per element of `dtype`
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int64_t offset = 0;          // absolute file offset of element 0
  int file = 0;                // index into SafetensorsSet's files
};

// Bytes read from tensor data are never more than this per pread.
inline constexpr int64_t kSafetensorsChunkBytes = int64_t{4} << 20;

class SafetensorsSet {
 public:
  // `path`: a `.safetensors` file, or an index `.json` naming shards.
  static absl::StatusOr<std::unique_ptr<SafetensorsSet>> Open(const std::string& path);
  ~SafetensorsSet();

  // Every tensor by name (the index's weight_map names, or the file's).
  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }
  const std::string& file_path(int file) const { return paths_[file]; }

  // True for the dtypes ReadF32 converts: F32, F16, BF16.
  static bool Convertible(const std::string& dtype);
  // Elements [first, first+count) of `t` (a Convertible dtype) as fp32 at
  // `out`, read in chunks of at most kSafetensorsChunkBytes; adds the bytes
  // read to *bytes_read.
  absl::Status ReadF32(const SafetensorsTensor& t, int64_t first, int64_t count, float* out,
                       int64_t* bytes_read) const;

 private:
  SafetensorsSet() = default;
  absl::Status AddFile(const std::string& path, const std::vector<std::string>* only);

  std::vector<std::string> paths_;
  std::vector<int> fds_;
  std::map<std::string, SafetensorsTensor> tensors_;
};

}  // namespace ckpt
}  // namespace zero

#endif  // ZERO_CORE_CKPT_SAFETENSORS_READER_H_
