#!/usr/bin/env python3
"""The shared peer benchmark (bench_peer.py, beside this file) with torchao's float8 training: the
FP8 peer of `deltatune bench --projections fp8`. Every linear projection of the decoder layers
becomes torchao's Float8Linear under the recipe --float8 names (rowwise: dynamic per-row scales,
as ours; tensorwise; rowwise_with_gw_hp: the weight gradient in bf16); the LM head and the Gated
DeltaNet's 48-wide gate inputs (in_proj_a, in_proj_b) stay bf16, as ours do. --compile-layers
compiles each decoder layer (torchao's casts fuse only under torch.compile). Everything else,
flags included, is bench_peer.py's.

torchao is carried in ../.carry (its wheel unzipped, as FLA's); its C++ extensions need torch
2.11, the GPU machine's, and float8 training does not use them.

  python3 float8_peer.py --float8 rowwise [--compile-layers] [bench_peer.py flags...]
"""
import argparse, os, runpy, sys

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser(add_help=False)
ap.add_argument("--float8", default="rowwise", choices=["rowwise", "tensorwise", "rowwise_with_gw_hp"])
ap.add_argument("--compile-layers", action="store_true")
ours, rest = ap.parse_known_args()
sys.path.insert(0, os.path.join(here, "..", ".carry"))

import torch  # noqa: E402
from torchao.float8 import Float8LinearConfig, convert_to_float8_training  # noqa: E402
from transformers.models.qwen3_5 import modeling_qwen3_5 as M  # noqa: E402

BF16_ONLY = ("in_proj_a", "in_proj_b")  # the GDN's gate inputs, bf16 in ours too


class Float8Peer(M.Qwen3_5ForCausalLM):
    def __init__(self, config):
        super().__init__(config)
        convert_to_float8_training(  # self.model: the decoder, so never the LM head
            self.model, config=Float8LinearConfig.from_recipe_name(ours.float8),
            module_filter_fn=lambda m, fqn: isinstance(m, torch.nn.Linear)
            and not fqn.endswith(BF16_ONLY) and m.in_features % 16 == 0
            and m.out_features % 16 == 0)
        if ours.compile_layers:
            for i, layer in enumerate(self.model.layers):
                self.model.layers[i] = torch.compile(layer)


M.Qwen3_5ForCausalLM = Float8Peer
sys.argv = [os.path.join(here, "bench_peer.py")] + rest
runpy.run_path(sys.argv[0], run_name="__main__")
