// fp4moe-bench's timing schedule (tools/fp4moe_bench.cpp, run_tokens): stream launches and CUDA-graph
// replays are timed alternately, a block of one kind then a block of the other, over a rotation of
// num_sets input sets (each with its own routing), so that both kinds run in the same clock and power
// state and no set's weights or activations are still in L2 from its last use.
// - One rotation runs across both kinds: launch number j of the whole schedule (stream and graph
//   counted together, in order) runs set j % num_sets, so a set's next use is num_sets launches later.
// - Each block is whole rotations (at least kMinTimingBlock launches), and the launches of each kind
//   are rounded up to whole rotations: each kind runs every set equally often, so that its median is
//   over the sets evenly, as the peers' (bench/peers_torch.py) and the median set's floor assume.
//   (Until session 45 the blocks were 10 launches: with 8 sets each kind ran half of them 1.5 times
//   as often as the other half.)
#pragma once

namespace fp4moe::tools {

inline constexpr int kMinTimingBlock = 10;

// Launches of one kind in a block: whole rotations, at least kMinTimingBlock (10-16 for 1-8 sets).
inline int timing_block(int num_sets) { return num_sets * ((kMinTimingBlock + num_sets - 1) / num_sets); }

// Launches of each kind in all: iters rounded up to whole rotations.
inline int timed_launches(int iters, int num_sets) { return (iters + num_sets - 1) / num_sets * num_sets; }

// The first schedule position of the stream block that starts after `done` launches of each kind,
// and of the graph block of n launches after it (the set of position j is j % num_sets).
inline int stream_block_start(int done) { return 2 * done; }
inline int graph_block_start(int done, int n) { return 2 * done + n; }

}  // namespace fp4moe::tools
