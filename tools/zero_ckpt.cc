// zero-ckpt: offline tools for zero checkpoints (core/ckpt/).
//
//   zero-ckpt [-v] inspect DIR [TAG]
//   zero-ckpt [-v] verify  DIR [TAG]
//   zero-ckpt [-v] export  DIR [TAG] OUT.safetensors [--bf16 | --fp16]
//   zero-ckpt [-v] export --hf DIR [TAG] OUT_DIR [--max-shard-size SIZE]
//                          [--config CONFIG_DIR] [--fp32 | --bf16 | --fp16]
//   zero-ckpt [-v] reshard DIR TAG OUT_DIR WORLD
//
// export --hf writes the Hugging Face layout for from_pretrained
// (core/ckpt/hf_export.h): the working dtype of the saving run unless a
// dtype is given, shards of SIZE (default 5GB), and config.json /
// generation_config.json from CONFIG_DIR (default DIR/TAG, where
// zero.torch's save_checkpoint puts them).
//
// TAG defaults to the one DIR/latest names. Progress goes to stderr: a line
// redrawn in place (bar, bytes, rate) when stderr is a terminal; with -v
// elsewhere a line at each further 5%. Exit status: 0 ok, 1 failure (message
// on stderr), 2 usage.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/ckpt/checkpoint_reader.h"
#include "core/ckpt/hf_export.h"
#include "core/ckpt/reshard.h"
#include "core/ckpt/safetensors.h"

namespace {

using namespace zero::ckpt;  // NOLINT: a small tool

constexpr char kUsage[] =
    "usage: zero-ckpt [-v] inspect DIR [TAG]\n"
    "       zero-ckpt [-v] verify  DIR [TAG]\n"
    "       zero-ckpt [-v] export  DIR [TAG] OUT.safetensors [--bf16 | --fp16]\n"
    "       zero-ckpt [-v] export --hf DIR [TAG] OUT_DIR [--max-shard-size SIZE]\n"
    "                              [--config CONFIG_DIR] [--fp32 | --bf16 | --fp16]\n"
    "       zero-ckpt [-v] reshard DIR TAG OUT_DIR WORLD\n";

int Usage(const std::string& why) {
  if (!why.empty()) std::fprintf(stderr, "zero-ckpt: %s\n", why.c_str());
  std::fputs(kUsage, stderr);
  return 2;
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "zero-ckpt: %s\n", std::string(s.message()).c_str());
  return 1;
}

// A terminal's progress line, redrawn at most 10 times a second and at the
// end: "zero-ckpt: export  45% |#########           | 12.3/27.0 MB  9.8 MB/s".
ProgressFn TtyLine(const std::string& what) {
  using Clock = std::chrono::steady_clock;
  struct State {
    Clock::time_point start = Clock::now(), last;
    bool drawn = false;
  };
  auto st = std::make_shared<State>();
  return [what, st](int64_t done, int64_t total) {
    const Clock::time_point now = Clock::now();
    if (done < total && st->drawn && now - st->last < std::chrono::milliseconds(100)) return true;
    st->last = now;
    st->drawn = true;
    const double frac = total > 0 ? static_cast<double>(done) / total : 1.0;
    constexpr int kWidth = 20;
    const int fill = static_cast<int>(frac * kWidth);
    const double secs = std::chrono::duration<double>(now - st->start).count();
    std::fprintf(stderr, "\rzero-ckpt: %s %3d%% |%s%s| %.1f/%.1f MB %6.1f MB/s%s", what.c_str(),
                 static_cast<int>(100 * frac), std::string(fill, '#').c_str(),
                 std::string(kWidth - fill, ' ').c_str(), done / 1e6, total / 1e6,
                 secs > 0 ? done / 1e6 / secs : 0.0, done >= total ? "\n" : "");
    std::fflush(stderr);
    return true;
  };
}

// Progress on stderr: the line above on a terminal; otherwise, with -v, a
// line at each further 5% and at the end.
ProgressFn Reporter(bool verbose, const std::string& what) {
  if (::isatty(STDERR_FILENO)) return TtyLine(what);
  if (!verbose) return nullptr;
  auto last = std::make_shared<int>(-1);
  return [what, last](int64_t done, int64_t total) {
    const int pct = total > 0 ? static_cast<int>(100 * done / total) : 100;
    if (pct / 5 != *last / 5 || done == total) {
      *last = pct;
      std::fprintf(stderr, "zero-ckpt: %s: %lld / %lld bytes (%d%%)\n", what.c_str(),
                   static_cast<long long>(done), static_cast<long long>(total), pct);
    }
    return true;
  };
}

int Inspect(const std::string& dir, const std::string& tag) {
  auto ck = Checkpoint::Open(dir, tag);
  if (!ck.ok()) return Fail(ck.status());
  const Manifest& m = (*ck)->manifest();
  std::vector<std::string> states;
  for (int k : m.states) states.push_back(StateName(k));
  std::printf("checkpoint  %s (format %d)\n", (*ck)->path().c_str(), m.format_version);
  std::printf("saved by    world size %d, stage %d, %s, optimizer %s (states: master%s%s)\n",
              m.world_size, m.stage, DTypeText(m.dtype).c_str(), m.optimizer.c_str(),
              states.empty() ? "" : ", ", absl::StrJoin(states, ", ").c_str());
  std::printf("steps       global %lld, skipped %lld, micro %lld\n",
              static_cast<long long>(m.global_step), static_cast<long long>(m.skipped_steps),
              static_cast<long long>(m.micro_step));
  std::printf("loss scale  %g (%s, iter %lld, last overflow %lld, hysteresis %d)\n",
              m.scaler.cur_scale, m.scaler_dynamic ? "dynamic" : "static",
              static_cast<long long>(m.scaler.cur_iter),
              static_cast<long long>(m.scaler.last_overflow_iter), m.scaler.cur_hysteresis);
  std::printf("config      %s\n", m.config_json.c_str());
  int64_t total = 0, trainable = 0;
  for (const ParamRecord& p : m.params) {
    total += p.numel;
    if (p.trainable) trainable += p.numel;
  }
  std::printf("params      %zu, %lld elements (%lld trainable)\n", m.params.size(),
              static_cast<long long>(total), static_cast<long long>(trainable));
  for (const ParamRecord& p : m.params) {
    std::vector<std::string> sl;
    for (const RankSlice& s : p.slices) {
      sl.push_back(absl::StrCat(s.rank, ":[", s.offset, ",", s.offset + s.numel, ")"));
    }
    std::printf("  %-32s %-14s %s %-9s %10lld  %s\n", p.name.c_str(),
                ShapeString(p.shape).c_str(), DTypeText(p.dtype).c_str(),
                p.trainable ? "trainable" : "frozen", static_cast<long long>(p.numel),
                absl::StrJoin(sl, " ").c_str());
  }
  std::printf("files       %zu, %lld bytes\n", m.files.size(),
              static_cast<long long>((*ck)->TotalBytes()));
  for (const FileRecord& f : m.files) {
    std::printf("  %-16s %12lld bytes  index xxh3 %016llx\n", f.file.c_str(),
                static_cast<long long>(f.bytes), static_cast<unsigned long long>(f.index_xxh3));
  }
  return 0;
}

int Verify(const std::string& dir, const std::string& tag, bool verbose) {
  auto ck = Checkpoint::Open(dir, tag);
  if (!ck.ok()) return Fail(ck.status());
  absl::Status s = (*ck)->Verify(Reporter(verbose, "verify"));
  if (!s.ok()) return Fail(s);
  std::printf("%s: ok (%zu files, every section's checksum matches)\n", (*ck)->path().c_str(),
              (*ck)->manifest().files.size());
  return 0;
}

int ExportHfLayout(const std::vector<std::string>& args, const HfExportOptions& options,
                   bool verbose) {
  if (args.size() < 2 || args.size() > 3) return Usage("export --hf: expected DIR [TAG] OUT_DIR");
  const std::string tag = args.size() == 3 ? args[1] : "";
  HfExportOptions o = options;
  o.progress = Reporter(verbose, "export");
  auto done = ExportHf(args[0], tag, args.back(), o);
  if (!done.ok()) return Fail(done.status());
  auto ck = Checkpoint::Open(args[0], tag);
  if (ck.ok() && (*ck)->manifest().frozen_excluded) {
    std::fprintf(stderr, "zero-ckpt: note: the checkpoint was saved without its frozen params "
                         "(exclude_frozen): %s holds the trainable params only\n",
                 args.back().c_str());
  }
  if (done->configs.empty()) {
    std::fprintf(stderr, "zero-ckpt: note: no config.json in %s; from_pretrained needs one "
                         "(--config CONFIG_DIR)\n",
                 o.config_dir.empty() ? "the checkpoint" : o.config_dir.c_str());
  }
  if (verbose) {
    for (const std::string& f : done->files) std::fprintf(stderr, "zero-ckpt: wrote %s\n", f.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool verbose = false, hf = false, hf_flags = false;
  zero::DType dtype = zero::DType::kF32;
  HfExportOptions hf_options;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-v" || a == "--verbose") {
      verbose = true;
    } else if (a == "--hf") {
      hf = true;
    } else if (a == "--fp32" || a == "--bf16" || a == "--fp16") {
      dtype = a == "--fp32" ? zero::DType::kF32
                            : a == "--bf16" ? zero::DType::kBF16 : zero::DType::kF16;
      hf_options.dtype_set = true;
      hf_options.dtype = dtype;
    } else if (a == "--max-shard-size" || a == "--config") {
      if (i + 1 >= argc) return Usage(absl::StrCat(a, " needs a value"));
      const std::string value = argv[++i];
      hf_flags = true;
      if (a == "--config") {
        hf_options.config_dir = value;
        continue;
      }
      auto size = ParseShardSize(value);
      if (!size.ok()) return Usage(std::string(size.status().message()));
      hf_options.max_shard_bytes = *size;
    } else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a.size() > 1 && a[0] == '-') {
      return Usage(absl::StrCat("unknown option ", a));
    } else {
      args.push_back(a);
    }
  }
  if (args.empty()) return Usage("");
  const std::string cmd = args[0];
  args.erase(args.begin());
  if ((hf || hf_flags) && cmd != "export") {
    return Usage(absl::StrCat(cmd, ": --hf, --max-shard-size and --config belong to export --hf"));
  }
  if (cmd == "inspect" || cmd == "verify") {
    if (args.size() < 1 || args.size() > 2) return Usage(absl::StrCat(cmd, ": expected DIR [TAG]"));
    const std::string tag = args.size() == 2 ? args[1] : "";
    return cmd == "inspect" ? Inspect(args[0], tag) : Verify(args[0], tag, verbose);
  }
  if (cmd == "export" && hf) return ExportHfLayout(args, hf_options, verbose);
  if (cmd == "export") {
    if (hf_flags) return Usage("export: --max-shard-size and --config need --hf");
    if (args.size() < 2 || args.size() > 3) return Usage("export: expected DIR [TAG] OUT.safetensors");
    const std::string tag = args.size() == 3 ? args[1] : "";
    absl::Status s = ExportSafetensors(args[0], tag, args.back(), dtype, Reporter(verbose, "export"));
    if (!s.ok()) return Fail(s);
    if (verbose) std::fprintf(stderr, "zero-ckpt: wrote %s\n", args.back().c_str());
    return 0;
  }
  if (cmd == "reshard") {
    if (args.size() != 4) return Usage("reshard: expected DIR TAG OUT_DIR WORLD");
    char* end = nullptr;
    long world = std::strtol(args[3].c_str(), &end, 10);
    if (*end != '\0' || world < 1 || world > 1 << 20) {
      return Usage(absl::StrCat("reshard: WORLD '", args[3], "' is not a positive integer"));
    }
    absl::Status s = ReshardCheckpoint(args[0], args[1], args[2], static_cast<int>(world),
                                       Reporter(verbose, "reshard"));
    if (!s.ok()) return Fail(s);
    if (verbose) std::fprintf(stderr, "zero-ckpt: wrote %s/%s for %ld ranks\n", args[2].c_str(), args[1].c_str(), world);
    return 0;
  }
  return Usage(absl::StrCat("unknown command '", cmd, "'"));
}
