"""Pyraformer for next-day hourly demand at bike-sharing docking stations.

Pyramidal attention (PAM) over a C-ary tree built by the coarser-scale
construction module (CSCM): hours, 4-hour blocks, 16-hour blocks and the whole
window, with `get_mask` and `refer_points` as in the reference code. Stations
opened during the look-back window have their history padded at the start;
the loader groups stations by opening date, so a batch shares one pad length.

Source: seed masked_fill_inplace.txt (与模型缓冲区的配合; 张量共享内存风险);
conventions.md section 2.3.
"""
import math
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_mask(input_size, window_size, inner_size):
    all_size = [input_size]
    for i in range(len(window_size)):
        all_size.append(math.floor(all_size[i] / window_size[i]))
    seq_length = sum(all_size)
    mask = torch.zeros(seq_length, seq_length)
    inner_window = inner_size // 2
    for layer_idx in range(len(all_size)):
        start = sum(all_size[:layer_idx])
        for i in range(start, start + all_size[layer_idx]):
            left_side = max(i - inner_window, start)
            right_side = min(i + inner_window + 1, start + all_size[layer_idx])
            mask[i, left_side:right_side] = 1
    for layer_idx in range(1, len(all_size)):
        start = sum(all_size[:layer_idx])
        for i in range(start, start + all_size[layer_idx]):
            left_side = (start - all_size[layer_idx - 1]) + (i - start) * window_size[layer_idx - 1]
            if i == (start + all_size[layer_idx] - 1):
                right_side = start
            else:
                right_side = (start - all_size[layer_idx - 1]) + (i - start + 1) * window_size[layer_idx - 1]
            mask[i, left_side:right_side] = 1
            mask[left_side:right_side, i] = 1
    mask = (1 - mask).bool()
    return mask, all_size


def refer_points(all_sizes, window_size):
    input_size = all_sizes[0]
    indexes = torch.zeros(input_size, len(all_sizes))
    for i in range(input_size):
        indexes[i][0] = i
        former_index = i
        for j in range(1, len(all_sizes)):
            start = sum(all_sizes[:j])
            inner_layer_idx = former_index - (start - all_sizes[j - 1])
            former_index = start + min(inner_layer_idx // window_size[j - 1], all_sizes[j] - 1)
            indexes[i][j] = former_index
    return indexes.unsqueeze(0).unsqueeze(3).long()


class Bottleneck_Construct(nn.Module):
    def __init__(self, d_model, window_size, d_inner):
        super().__init__()
        self.conv_layers = nn.ModuleList([
            nn.Sequential(nn.Conv1d(d_inner, d_inner, kernel_size=w, stride=w), nn.BatchNorm1d(d_inner), nn.ELU())
            for w in window_size
        ])
        self.down = nn.Linear(d_model, d_inner)
        self.up = nn.Linear(d_inner, d_model)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, enc_input):
        temp_input = self.down(enc_input).permute(0, 2, 1)
        all_inputs = []
        for conv in self.conv_layers:
            temp_input = conv(temp_input)
            all_inputs.append(temp_input)
        all_inputs = self.up(torch.cat(all_inputs, dim=2).transpose(1, 2))
        return self.norm(torch.cat([enc_input, all_inputs], dim=1))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, d_inner, n_head, dropout=0.1):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.fc = nn.Linear(d_model, d_model)
        self.norm1, self.norm2 = nn.LayerNorm(d_model, eps=1e-6), nn.LayerNorm(d_model, eps=1e-6)
        self.pos_ffn = nn.Sequential(nn.Linear(d_model, d_inner), nn.GELU(), nn.Dropout(dropout), nn.Linear(d_inner, d_model))
        self.dropout = nn.Dropout(dropout)

    def forward(self, enc_input, slf_attn_mask):
        b, n, d = enc_input.shape
        q, k, v = self.qkv(enc_input).view(b, n, 3, self.n_head, d // self.n_head).permute(2, 0, 3, 1, 4)
        attn = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(d // self.n_head)
        attn = attn.masked_fill(slf_attn_mask.unsqueeze(1), torch.finfo(attn.dtype).min)
        attn = self.dropout(F.softmax(attn, dim=-1))
        out = self.fc(torch.matmul(attn, v).transpose(1, 2).reshape(b, n, d))
        enc_output = self.norm1(enc_input + self.dropout(out))
        return self.norm2(enc_output + self.pos_ffn(enc_output))


class Pyraformer(nn.Module):
    def __init__(self, opt):
        super().__init__()
        mask, self.all_size = get_mask(opt.input_size, opt.window_size, opt.inner_size)
        self.register_buffer("mask", mask)
        self.register_buffer("indexes", refer_points(self.all_size, opt.window_size))
        self.window_size = opt.window_size
        self.value_embedding = nn.Conv1d(opt.enc_in, opt.d_model, 3, padding=1, padding_mode="circular")
        self.temporal_embedding = nn.Linear(opt.n_marks, opt.d_model)
        self.position = nn.Parameter(torch.randn(opt.input_size, opt.d_model) * 0.02)
        self.conv_layers = Bottleneck_Construct(opt.d_model, opt.window_size, opt.d_bottleneck)
        self.layers = nn.ModuleList([EncoderLayer(opt.d_model, opt.d_inner_hid, opt.n_head) for _ in range(opt.n_layer)])
        self.predictor = nn.Linear(len(self.all_size) * opt.d_model, opt.predict_step)

    def padded_nodes(self, n_pad):
        flags, span = [], 1
        for scale, size in enumerate(self.all_size):
            if scale > 0:
                span *= self.window_size[scale - 1]
            flags.append((torch.arange(size, device=self.mask.device) + 1) * span <= n_pad)
        return torch.cat(flags)

    def forward(self, x_enc, x_mark_enc, n_pad=0):
        seq_enc = self.value_embedding(x_enc.permute(0, 2, 1)).transpose(1, 2)
        seq_enc = seq_enc + self.temporal_embedding(x_mark_enc) + self.position
        mask = self.mask
        if n_pad > 0:
            mask = self.mask.masked_fill(self.padded_nodes(n_pad)[None, :], True)
        mask = mask.repeat(len(seq_enc), 1, 1)
        seq_enc = self.conv_layers(seq_enc)
        for layer in self.layers:
            seq_enc = layer(seq_enc, mask)
        indexes = self.indexes.repeat(seq_enc.size(0), 1, 1, seq_enc.size(2)).view(seq_enc.size(0), -1, seq_enc.size(2))
        all_enc = torch.gather(seq_enc, 1, indexes).view(seq_enc.size(0), self.all_size[0], -1)
        return self.predictor(all_enc[:, -1, :])


def station_batch(n_stations, input_size, predict_step, n_pad):
    hours = torch.arange(input_size + predict_step, dtype=torch.float32)
    commute = torch.exp(-((hours % 24 - 8) ** 2) / 4) + torch.exp(-((hours % 24 - 18) ** 2) / 4)
    demand = torch.rand(n_stations, 1) * 10 * commute + torch.rand(n_stations, input_size + predict_step)
    demand[:, :n_pad] = 0.0
    marks = torch.stack([torch.sin(hours / 24 * 2 * math.pi), torch.cos(hours / 24 * 2 * math.pi),
                         (hours // 24 % 7 >= 5).float()], -1).expand(n_stations, -1, -1)
    return demand[:, :input_size, None], marks[:, :input_size], demand[:, input_size:]


if __name__ == "__main__":
    torch.manual_seed(0)
    opt = SimpleNamespace(input_size=64, window_size=[4, 4, 4], inner_size=3, enc_in=1, n_marks=3, d_model=16,
                          d_bottleneck=8, d_inner_hid=32, n_head=4, n_layer=2, predict_step=24)
    model = Pyraformer(opt)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step, n_pad in enumerate([0, 40, 0, 24, 0]):
        x, marks, y = station_batch(4, opt.input_size, opt.predict_step, n_pad)
        loss = F.mse_loss(model(x, marks, n_pad=n_pad), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        x, marks, y = station_batch(4, opt.input_size, opt.predict_step, n_pad=0)
        mae = (model(x, marks) - y).abs().mean()
    print("train mse %.4f" % loss.item(), "eval mae %.4f" % mae.item(), "pyramid", model.all_size)
