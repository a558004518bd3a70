// Several ranks as threads of one process: the fast way to test multi-rank
// logic. Collectives post pointers into a shared slot table, meet at a
// barrier, copy or reduce straight from the peers' buffers, and meet again.
#ifndef ZERO_CORE_COMM_THREAD_COMMUNICATOR_H_
#define ZERO_CORE_COMM_THREAD_COMMUNICATOR_H_

#include <memory>
#include <vector>

#include "core/comm/communicator.h"

namespace zero {

// world_size communicators of one group; element r is rank r. Each must be
// driven by one thread at a time. world_size 1 is the self communicator.
std::vector<std::unique_ptr<Communicator>> MakeThreadCommunicators(
    int world_size);

}  // namespace zero

#endif  // ZERO_CORE_COMM_THREAD_COMMUNICATOR_H_
