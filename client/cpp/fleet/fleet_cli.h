// The fleet subcommands of `nearprep` (issue 14):
//   nearprep manifest --root DIR --format tfrecord|tar [--partitions C]
//                     [--shard-pattern GLOB] [--out FILE]
//       writes the dataset manifest (server/fleet/manifest.h) and prints its
//       hash (the dataset version).
//   nearprep fleet-plan --manifest FILE --seed S --epoch E --block B
//                       --window W --global-batch G [--trainers T --trainer k]
//                       [--batch g | --all]
//       prints "POSITION SAMPLE_ID PARTITION" lines of the global plan
//       (server/fleet/global_plan.h): the whole epoch, one global batch, or
//       trainer k's slice of it. tests/python/test_fleet_plan.py compares
//       the Python plan with it.
//   nearprep placement --manifest M --nodes a,b,c --replicas R --version V
//                      [--previous OLD] --out FILE
//       writes a placement (server/fleet/placement.h): each partition on the
//       R nodes with the highest rendezvous score; with --previous, checks
//       that V is greater and prints what each node gains and loses.
//   nearprep placement --manifest M --placement FILE --shards-for NODE
//       prints the shard names NODE must hold, one per line.
#ifndef NEARPREP_CLIENT_CPP_FLEET_FLEET_CLI_H_
#define NEARPREP_CLIENT_CPP_FLEET_FLEET_CLI_H_

#include <cstdint>
#include <memory>
#include <string>

namespace CLI {
class App;
}

namespace nearprep {

struct FleetCommands;
// Adds the subcommands to `app`; the result keeps their options.
std::shared_ptr<FleetCommands> AddFleetCommands(CLI::App* app);
// After parsing: runs the fleet subcommand that was given and returns its
// exit status, or -1 when none of them was.
int RunFleetCommands(const FleetCommands& c);

}  // namespace nearprep

#endif  // NEARPREP_CLIENT_CPP_FLEET_FLEET_CLI_H_
