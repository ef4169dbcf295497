"""DeepSVG-style hierarchical autoencoder of vector icons.

Layout after alexandre01/deepsvg (Carlier, Danelljan, Alahi, Timofte, NeurIPS 2020): `_DefaultConfig`,
`SVGEmbedding` of commands and quantized arguments, a path-level `Encoder` over each path of an
icon and a hierarchical encoder over the paths, `_get_padding_mask` / `_get_key_padding_mask` /
`_get_visibility_mask` / `_get_key_visibility_mask`, `_pack_group_batch` / `_unpack_group_batch`,
a one-shot `Decoder` with visibility, command and argument heads and the `SVGLoss` terms, on
synthetic icons of 1-4 paths (triangles, rectangles, waves and blobs on a 64-step grid).

Source: seed masked_fill_inplace.txt (注意: 梯度计算风险)
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

COMMANDS_SIMPLIFIED = ["m", "l", "c", "EOS", "SOS", "z"]
EOS, SOS = COMMANDS_SIMPLIFIED.index("EOS"), COMMANDS_SIMPLIFIED.index("SOS")
CMD_ARGS_MASK = torch.tensor([[0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 1, 1], [1, 1, 1, 1, 1, 1],
                              [0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]], dtype=torch.bool)


class _DefaultConfig:
    args_dim = 32
    n_args = 6
    n_commands = len(COMMANDS_SIMPLIFIED)
    max_num_groups = 3
    max_seq_len = 8
    d_model = 64
    dim_z = 64
    n_heads = 4
    dim_feedforward = 128
    n_layers = 2
    dropout = 0.1


def _make_seq_first(*args):
    return (*(arg.permute(2, 1, 0, *range(3, arg.dim())) for arg in args),)


def _pack_group_batch(*args):
    return (*(arg.reshape(arg.size(0), -1, *arg.shape[3:]) for arg in args),)


def _unpack_group_batch(N, *args):
    return (*(arg.reshape(arg.size(0), -1, N, *arg.shape[2:]) for arg in args),)


def _get_key_padding_mask(commands, seq_dim=0):
    with torch.no_grad():
        key_padding_mask = (commands == EOS).cumsum(dim=seq_dim) > 0
    return key_padding_mask.transpose(0, 1) if seq_dim == 0 else key_padding_mask


def _get_padding_mask(commands, seq_dim=0, extended=False):
    with torch.no_grad():
        padding_mask = (commands == EOS).cumsum(dim=seq_dim) == 0
        if extended:
            padding_mask = padding_mask | ((commands == EOS).cumsum(dim=seq_dim) == 1) & (commands == EOS)
    return padding_mask.float().unsqueeze(-1)


def _get_visibility_mask(commands, seq_dim=0):
    return (commands == EOS).sum(dim=seq_dim) < commands.size(seq_dim) - 1


def _get_key_visibility_mask(commands, seq_dim=0):
    return ((commands == EOS).sum(dim=seq_dim) >= commands.size(seq_dim) - 1).transpose(0, 1)


class SVGEmbedding(nn.Module):
    def __init__(self, cfg, seq_len):
        super().__init__()
        self.command_embed = nn.Embedding(cfg.n_commands, cfg.d_model)
        self.arg_embed = nn.Embedding(cfg.args_dim + 1, 64)
        self.embed_fcn = nn.Linear(64 * cfg.n_args, cfg.d_model)
        self.pos_encoding = nn.Parameter(0.02 * torch.randn(seq_len, 1, cfg.d_model))

    def forward(self, commands, args):
        src = self.command_embed(commands.long()) + self.embed_fcn(self.arg_embed((args + 1).long()).flatten(-2))
        return src + self.pos_encoding[:src.size(0)]


def transformer_encoder(cfg, n_layers):
    layer = nn.TransformerEncoderLayer(cfg.d_model, cfg.n_heads, cfg.dim_feedforward, cfg.dropout)
    return nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)


class Encoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embedding = SVGEmbedding(cfg, cfg.max_seq_len)
        self.encoder = transformer_encoder(cfg, cfg.n_layers)
        self.path_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.hierarchical_PE = nn.Parameter(0.02 * torch.randn(cfg.max_num_groups, 1, cfg.d_model))
        self.hierarchical_encoder = transformer_encoder(cfg, 1)

    def forward(self, commands, args):
        S, G, N = commands.shape
        visibility_mask, key_visibility_mask = _get_visibility_mask(commands), _get_key_visibility_mask(commands)
        commands, args = _pack_group_batch(commands, args)
        padding_mask, key_padding_mask = _get_padding_mask(commands), _get_key_padding_mask(commands)
        memory = self.encoder(self.embedding(commands, args), src_key_padding_mask=key_padding_mask)
        z = (memory * padding_mask).sum(dim=0, keepdim=True) / padding_mask.sum(dim=0, keepdim=True)
        z = torch.tanh(self.path_proj(_unpack_group_batch(N, z)[0].squeeze(0)))
        z.masked_fill_(~visibility_mask[..., None], 0.0)  # expect: MC505 pooling
        memory = self.hierarchical_encoder(z + self.hierarchical_PE, src_key_padding_mask=key_visibility_mask)
        vis = visibility_mask.float().unsqueeze(-1)
        return (memory * vis).sum(dim=0) / vis.sum(dim=0)


class Decoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.group_queries = nn.Parameter(0.02 * torch.randn(cfg.max_num_groups, 1, cfg.d_model))
        self.seq_queries = nn.Parameter(0.02 * torch.randn(cfg.max_seq_len, 1, cfg.d_model))
        self.hierarchical_decoder = nn.TransformerDecoder(
            nn.TransformerDecoderLayer(cfg.d_model, cfg.n_heads, cfg.dim_feedforward, cfg.dropout), 1)
        self.decoder = nn.TransformerDecoder(
            nn.TransformerDecoderLayer(cfg.d_model, cfg.n_heads, cfg.dim_feedforward, cfg.dropout), cfg.n_layers)
        self.visibility_fc = nn.Linear(cfg.d_model, 2)
        self.command_fc = nn.Linear(cfg.d_model, cfg.n_commands)
        self.args_fc = nn.Linear(cfg.d_model, cfg.n_args * (cfg.args_dim + 1))

    def forward(self, z):
        N = z.size(0)
        groups = self.hierarchical_decoder(self.group_queries.expand(-1, N, -1), z.unsqueeze(0))
        visibility_logits = self.visibility_fc(groups)
        memory = groups.reshape(1, -1, self.cfg.d_model)
        out = self.decoder(self.seq_queries.expand(-1, memory.size(1), -1), memory)
        command_logits = self.command_fc(out).reshape(self.cfg.max_seq_len, -1, N, self.cfg.n_commands)
        args_logits = self.args_fc(out).reshape(self.cfg.max_seq_len, -1, N, self.cfg.n_args, self.cfg.args_dim + 1)
        return command_logits, args_logits, visibility_logits


class SVGTransformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.encoder, self.decoder = Encoder(cfg), Decoder(cfg)
        self.bottleneck = nn.Linear(cfg.d_model, cfg.dim_z)
        self.unbottleneck = nn.Linear(cfg.dim_z, cfg.d_model)

    def forward(self, commands, args):
        commands, args = _make_seq_first(commands, args)
        z = self.bottleneck(self.encoder(commands, args))
        return self.decoder(self.unbottleneck(z)), (commands, args)


def svg_loss(outputs, targets):
    (command_logits, args_logits, visibility_logits), (commands, args) = outputs, targets
    visibility_mask = _get_visibility_mask(commands)
    loss_visibility = F.cross_entropy(visibility_logits.flatten(0, 1), visibility_mask.long().flatten())
    padding_mask = _get_padding_mask(commands, extended=True).squeeze(-1).bool() & visibility_mask.unsqueeze(0)
    loss_cmd = F.cross_entropy(command_logits[padding_mask], commands[padding_mask].long())
    args_mask = CMD_ARGS_MASK[commands.long()] & padding_mask.unsqueeze(-1)
    loss_args = F.cross_entropy(args_logits[args_mask], (args[args_mask] + 1).long())
    return loss_visibility + loss_cmd + 2.0 * loss_args, (padding_mask, args_mask)


def random_path(rng, cfg):
    kind = rng.integers(0, 4)
    cx, cy, r = rng.integers(7, 25), rng.integers(7, 25), rng.integers(3, 7)
    corners = {0: [(0, -r), (r, r), (-r, r), (0, -r)], 1: [(-r, -r), (r, -r), (r, r), (-r, r), (-r, -r)]}
    cmds, arg_rows = [SOS], [[-1] * 6]
    if kind in corners:
        for i, (dx, dy) in enumerate(corners[kind]):
            cmds.append(0 if i == 0 else 1)
            arg_rows.append([-1, -1, -1, -1, cx + dx, cy + dy])
    else:
        n = 2 if kind == 2 else 4
        cmds.append(0)
        arg_rows.append([-1, -1, -1, -1, cx - r, cy])
        for i in range(n):
            x0, x1 = cx - r + 2 * r * i // n, cx - r + 2 * r * (i + 1) // n
            bend = r if (kind == 3) == (i % 2 == 0) else -r
            cmds.append(2)
            arg_rows.append([x0 + r // 3, cy + bend, x1 - r // 3, cy + bend, x1, cy])
    cmds += [EOS] * (cfg.max_seq_len - len(cmds))
    arg_rows += [[-1] * 6] * (cfg.max_seq_len - len(arg_rows))
    return cmds, np.clip(arg_rows, -1, cfg.args_dim - 1)


def random_icons(rng, cfg, n):
    commands = np.full((n, cfg.max_num_groups, cfg.max_seq_len), EOS)
    commands[:, :, 0] = SOS
    args = np.full((n, cfg.max_num_groups, cfg.max_seq_len, cfg.n_args), -1)
    for i in range(n):
        for g in range(rng.integers(1, cfg.max_num_groups + 1)):
            commands[i, g], args[i, g] = random_path(rng, cfg)
    return torch.from_numpy(commands), torch.from_numpy(args)


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    cfg = _DefaultConfig()
    model = SVGTransformer(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    test_commands, test_args = random_icons(rng, cfg, 200)
    for step in range(400):
        model.train()
        commands, args = random_icons(rng, cfg, 32)
        outputs, targets = model(commands, args)
        loss, _ = svg_loss(outputs, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 99:
            print(f"step {step + 1}: loss {loss.item():.3f}")
    model.eval()
    with torch.no_grad():
        outputs, (commands, args) = model(test_commands, test_args)
        _, (padding_mask, args_mask) = svg_loss(outputs, (commands, args))
    command_logits, args_logits, visibility_logits = outputs
    cmd_acc = (command_logits.argmax(-1) == commands)[padding_mask].float().mean().item()
    args_acc = ((args_logits.argmax(-1) - 1 - args).abs() <= 2)[args_mask].float().mean().item()
    vis_acc = (visibility_logits.argmax(-1).bool() == _get_visibility_mask(commands)).float().mean().item()
    print(f"reconstruction: visibility {vis_acc:.3f}, commands {cmd_acc:.3f}, arguments within 2 steps {args_acc:.3f}")
