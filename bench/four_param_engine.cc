#include "bench/four_param_engine.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "core/comm/thread_communicator.h"

namespace zero {
namespace bench {

void CheckOk(const absl::Status& s, const char* bench, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s: %s\n", bench, what, s.ToString().c_str());
    std::exit(1);
  }
}

Config FourParamConfig(int stage, DType dtype) {
  Config c;
  c.stage = stage;
  c.dtype = dtype;
  c.steps_per_print = 0;
  c.stage3_param_persistence_threshold = 0;
  return c;
}

FourParamEngine::FourParamEngine(const Config& c, std::unique_ptr<Device> device,
                                 int64_t params, const char* bench)
    : bench_(bench), stage_(c.stage), comms_(MakeThreadCommunicators(1)) {
  auto e = Engine::Create(c, comms_[0].get());
  CheckOk(e.status(), bench_, "create");
  engine_ = std::move(*e);
  CheckOk(engine_->SetDevice(std::move(device)), bench_, "set_device");
  for (int i = 0; i < 4; ++i) {
    ParamSpec p;
    p.name = "p" + std::to_string(i);
    p.shape = {params / 4};
    p.dtype = c.dtype;
    auto id = engine_->RegisterParam(p);
    CheckOk(id.status(), bench_, "register");
    ids_.push_back(*id);
  }
  CheckOk(engine_->Finalize(), bench_, "finalize");
}

void FourParamEngine::Forward() {
  if (stage_ != 3) return;
  for (int id : ids_) {
    CheckOk(engine_->Gather(id).status(), bench_, "gather");
    CheckOk(engine_->Release(id), bench_, "release");
  }
}

void FourParamEngine::Backward() {
  for (auto it = ids_.rbegin(); it != ids_.rend(); ++it) {
    CheckOk(engine_->GradBuffer(*it).status(), bench_, "grad_buffer");
    CheckOk(engine_->GradReady(*it), bench_, "grad_ready");
  }
}

void FourParamEngine::Step() {
  CheckOk(engine_->Step().status(), bench_, "step");
  engine_->device()->Synchronize();
}

}  // namespace bench
}  // namespace zero
