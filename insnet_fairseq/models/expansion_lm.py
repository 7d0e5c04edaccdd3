"""The iterative expansion LM (Casas et al. 2020, "Syntax-driven Iterative Expansion Language Models for
Controllable Text Generation", section 3.1), registered as ``expansion_lm`` with the architecture
``expansion_lm_small`` (4 layers, d=256, 4 heads, FFN 1024: the size of ``insnet_lm_small``'s 3 layers plus one,
since the paper splits the stack around the expansion input).

A Transformer *without* a causal mask (fairseq's encoder layers) over one level transition's input:
token and placeholder embeddings + sinusoidal positions + a learned *head-position* embedding (the input
position of each item's head; the root and padding have their own rows). After ``--expansion-layer`` layers
the expansion placeholders are predicted; the chosen expansion (the gold one in training, a sampled or
argmax one in decoding) is embedded and added to that hidden state, the remaining layers run, and the
token head predicts the words. Outputs mask the dependency placeholders and ``<s>``/``<pad>``/``</s>``.

Shapes: tokens, heads, expansions, placeholders [B, m] -> token logits [P, V], expansion logits [P, E] at the
P placeholders (only they are predicted, so only they are projected to the vocabularies).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.models import BaseFairseqModel, register_model, register_model_architecture
from fairseq.modules import LayerNorm, PositionalEmbedding, TransformerEncoderLayer
from torch import Tensor

from insnet_fairseq.modules.packed_linear import pack_linears


@register_model("expansion_lm")
class ExpansionLM(BaseFairseqModel):
    @staticmethod
    def add_args(parser):
        parser.add_argument("--embed-dim", type=int, metavar="D")
        parser.add_argument("--ffn-embed-dim", type=int, metavar="D")
        parser.add_argument("--layers", type=int, metavar="N", help="Transformer layers in all")
        parser.add_argument("--attention-heads", type=int, metavar="N")
        parser.add_argument("--expansion-layer", type=int, metavar="N",
                            help="the expansions are predicted from (and added to) the output of this layer")
        parser.add_argument("--dropout", type=float, metavar="P")
        parser.add_argument("--attention-dropout", type=float, metavar="P")
        parser.add_argument("--max-positions", type=int, metavar="N", help="longest transition input")

    def __init__(self, args, tokens_dict, expansions_dict, placeholder_ids):
        super().__init__()
        self.args = args
        d = args.embed_dim
        self.pad, self.max_len = tokens_dict.pad(), args.max_positions
        self.embed_tokens = nn.Embedding(len(tokens_dict), d, padding_idx=self.pad)
        nn.init.normal_(self.embed_tokens.weight, mean=0, std=d ** -0.5)
        nn.init.zeros_(self.embed_tokens.weight[self.pad])
        self.embed_positions = PositionalEmbedding(args.max_positions, d, self.pad, learned=False)
        self.embed_heads = nn.Embedding(args.max_positions + 2, d, padding_idx=0)  # 0: padding, 1: root, 2 + p
        nn.init.normal_(self.embed_heads.weight, mean=0, std=d ** -0.5)
        nn.init.zeros_(self.embed_heads.weight[0])
        self.embed_expansions = nn.Embedding(len(expansions_dict), d, padding_idx=expansions_dict.pad())
        nn.init.normal_(self.embed_expansions.weight, mean=0, std=d ** -0.5)
        nn.init.zeros_(self.embed_expansions.weight[expansions_dict.pad()])
        self.layers = nn.ModuleList(TransformerEncoderLayer(args) for _ in range(args.layers))
        self.expansion_norm, self.final_norm = LayerNorm(d), LayerNorm(d)
        self.expansion_out = nn.Linear(d, len(expansions_dict))
        self.dropout = nn.Dropout(args.dropout)
        banned = torch.zeros(len(tokens_dict), dtype=torch.bool)
        banned[list(placeholder_ids) + [tokens_dict.bos(), self.pad, tokens_dict.eos()]] = True
        self.register_buffer("banned_tokens", banned, persistent=False)
        banned_exp = torch.zeros(len(expansions_dict), dtype=torch.bool)
        banned_exp[[expansions_dict.bos(), expansions_dict.pad(), expansions_dict.eos()]] = True
        self.register_buffer("banned_expansions", banned_exp, persistent=False)

    @classmethod
    def build_model(cls, args, task):
        expansion_lm_small(args)
        if not hasattr(task, "expansion_dictionary"):
            raise ValueError("--arch expansion_lm_* trains with --task expansion_lm")
        model = cls(args, task.target_dictionary, task.expansion_dictionary, task.placeholder_ids)
        return pack_linears(model)  # the package's linear layers (modules/packed_linear.py), as InsNet's

    def max_positions(self):
        return None  # a sentence item's size counts all of its transitions; each transition is checked in embed()

    def embed(self, tokens: Tensor, heads: Tensor) -> Tensor:
        """tokens, heads [B, m] (heads: input position of the head, -1 root, -2 padding) -> x [B, m, D]."""
        if tokens.size(1) > self.max_len:
            raise ValueError(f"a level transition of {tokens.size(1)} items is longer than the model's "
                             f"--max-positions {self.max_len}")
        x = self.embed_tokens(tokens) * (self.args.embed_dim ** 0.5)  # [B, m, D]
        x = x + self.embed_positions(tokens) + self.embed_heads((heads + 2).clamp(0, self.max_len + 1))
        return self.dropout(x)

    def run_layers(self, x: Tensor, padding: Tensor, start: int, stop: int) -> Tensor:
        x = x.transpose(0, 1)  # [m, B, D]: fairseq's layers are time-first
        for layer in self.layers[start:stop]:
            x = layer(x, encoder_padding_mask=padding if padding.any() else None)
        return x.transpose(0, 1)  # [B, m, D]

    def expansion_logits(self, tokens: Tensor, heads: Tensor, where: Tensor):
        """The lower layers and the expansion head at the placeholders ``where`` (bool [B, m])
        -> (hidden [B, m, D], logits [P, E] at the P placeholders, row-major, padding [B, m])."""
        padding = tokens.eq(self.pad)  # [B, m]
        h = self.run_layers(self.embed(tokens, heads), padding, 0, self.args.expansion_layer)
        logits = self.expansion_out(self.expansion_norm(h[where]))  # [P, E]
        return h, logits.masked_fill(self.banned_expansions, float("-inf")), padding

    def token_logits(self, h: Tensor, padding: Tensor, expansions: Tensor, where: Tensor) -> Tensor:
        """The chosen expansions [B, m] added to the hidden state, the upper layers, the token head at the
        placeholders ``where`` -> [P, V]. Only the placeholders are projected to the vocabulary."""
        h = self.run_layers(h + self.embed_expansions(expansions), padding, self.args.expansion_layer, len(self.layers))
        logits = F.linear(self.final_norm(h[where]), self.embed_tokens.weight)  # [P, V], tied output embedding
        return logits.masked_fill(self.banned_tokens, float("-inf"))

    def forward(self, tokens: Tensor, heads: Tensor, expansions: Tensor, where: Tensor):
        """Training (teacher forcing): the gold ``expansions`` [B, m] feed the upper layers; ``where`` [B, m]
        marks the placeholders. -> {"token": [P, V], "expansion": [P, E]}."""
        h, exp_logits, padding = self.expansion_logits(tokens, heads, where)
        return {"token": self.token_logits(h, padding, expansions, where), "expansion": exp_logits}


@register_model_architecture("expansion_lm", "expansion_lm_small")
def expansion_lm_small(args):
    args.embed_dim = getattr(args, "embed_dim", None) or 256
    args.ffn_embed_dim = getattr(args, "ffn_embed_dim", None) or 1024
    args.layers = getattr(args, "layers", None) or 4
    args.attention_heads = getattr(args, "attention_heads", None) or 4
    args.expansion_layer = getattr(args, "expansion_layer", None) or args.layers // 2
    args.dropout = getattr(args, "dropout", None) if getattr(args, "dropout", None) is not None else 0.1
    args.attention_dropout = getattr(args, "attention_dropout", None) or 0.0
    args.max_positions = getattr(args, "max_positions", None) or 256
    # fairseq's TransformerEncoderLayer reads the encoder_* names
    args.encoder_embed_dim, args.encoder_ffn_embed_dim = args.embed_dim, args.ffn_embed_dim
    args.encoder_attention_heads, args.encoder_normalize_before = args.attention_heads, True
    args.activation_fn = getattr(args, "activation_fn", None) or "relu"
    args.activation_dropout = getattr(args, "activation_dropout", None) or 0.0
    if not 1 <= args.expansion_layer < args.layers:
        raise ValueError(f"--expansion-layer must be between 1 and --layers - 1 ({args.layers - 1}), "
                         f"got {args.expansion_layer}")
