#include "rendezvous/types.h"

namespace dgt::rendezvous {

bool SameRound(const Assignment& a, const Assignment& held) {
  return a.run_id == held.run_id && a.round == held.round && a.node_rank == held.node_rank &&
         a.node_count == held.node_count && a.world_size == held.world_size &&
         a.first_global_rank == held.first_global_rank && a.master_addr == held.master_addr &&
         a.master_port == held.master_port && a.restart_count == held.restart_count;
}

}  // namespace dgt::rendezvous
