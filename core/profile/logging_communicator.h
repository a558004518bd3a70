// A communicator that times every collective of the one it wraps, for the
// comms log (CommLog) and the trace (Recorder), on every backend. It counts
// traffic as the backends do (Communicator::Count with the shared formulas),
// so zero_stats reads the same numbers through it.
#ifndef ZERO_CORE_PROFILE_LOGGING_COMMUNICATOR_H_
#define ZERO_CORE_PROFILE_LOGGING_COMMUNICATOR_H_

#include <memory>

#include "core/comm/communicator.h"
#include "core/profile/comm_log.h"
#include "core/profile/recorder.h"

namespace zero {

// `log` and `recorder` (either may be null) must outlive the result.
std::unique_ptr<Communicator> MakeLoggingCommunicator(std::unique_ptr<Communicator> inner,
                                                      CommLog* log, Recorder* recorder);

}  // namespace zero

#endif  // ZERO_CORE_PROFILE_LOGGING_COMMUNICATOR_H_
