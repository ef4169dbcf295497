"""Speaker verification with ECAPA-TDNN (SpeechBrain layout) and an AAM-softmax head.

Utterances of different durations are padded into a batch and carried with
relative lengths (1.0 = the longest), as SpeechBrain does; the SE blocks and the
attentive statistics pooling turn the relative lengths into frame masks. Trials
are scored by cosine similarity and summarised by the equal error rate.

Source: pytorch/pytorch#103963 (conventions.md section 3 item 6); seed
self_attention_mask_guide.txt section 3 and section 7 Q3.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def length_to_mask(length, max_len=None, dtype=None, device=None):
    assert len(length.shape) == 1
    if max_len is None:
        max_len = length.max().long().item()
    mask = torch.arange(max_len, device=length.device, dtype=length.dtype).expand(len(length), max_len) < length.unsqueeze(1)
    if dtype is None:
        dtype = length.dtype
    return torch.as_tensor(mask, dtype=dtype, device=device if device is not None else length.device)


class TDNNBlock(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, dilation):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation, padding=dilation * (kernel_size - 1) // 2)
        self.norm = nn.BatchNorm1d(out_channels)

    def forward(self, x):
        return self.norm(F.relu(self.conv(x)))


class SEBlock(nn.Module):
    def __init__(self, in_channels, se_channels, out_channels):
        super().__init__()
        self.conv1 = nn.Conv1d(in_channels, se_channels, 1)
        self.conv2 = nn.Conv1d(se_channels, out_channels, 1)

    def forward(self, x, lengths=None):
        L = x.shape[-1]
        if lengths is not None:
            mask = length_to_mask(lengths * L, max_len=L, device=x.device).unsqueeze(1)
            s = (x * mask).sum(dim=2, keepdim=True) / mask.sum(dim=2, keepdim=True)
        else:
            s = x.mean(dim=2, keepdim=True)
        return torch.sigmoid(self.conv2(F.relu(self.conv1(s)))) * x


class SERes2NetBlock(nn.Module):
    def __init__(self, channels, res2net_scale=4, se_channels=16, kernel_size=3, dilation=2):
        super().__init__()
        self.tdnn1 = TDNNBlock(channels, channels, 1, 1)
        self.blocks = nn.ModuleList(TDNNBlock(channels // res2net_scale, channels // res2net_scale, kernel_size, dilation) for _ in range(res2net_scale - 1))
        self.tdnn2 = TDNNBlock(channels, channels, 1, 1)
        self.se_block = SEBlock(channels, se_channels, channels)
        self.scale = res2net_scale

    def forward(self, x, lengths=None):
        residual = x
        chunks, y, y_i = torch.chunk(self.tdnn1(x), self.scale, dim=1), [], None
        for i, x_i in enumerate(chunks):
            y_i = x_i if i == 0 else self.blocks[i - 1](x_i if i == 1 else x_i + y_i)
            y.append(y_i)
        return self.se_block(self.tdnn2(torch.cat(y, dim=1)), lengths) + residual


class AttentiveStatisticsPooling(nn.Module):
    def __init__(self, channels, attention_channels=32, global_context=True):
        super().__init__()
        self.eps = 1e-12
        self.global_context = global_context
        self.tdnn = TDNNBlock(channels * 3 if global_context else channels, attention_channels, 1, 1)
        self.conv = nn.Conv1d(attention_channels, channels, 1)

    def forward(self, x, lengths=None):
        L = x.shape[-1]

        def _compute_statistics(x, m, dim=2, eps=self.eps):
            mean = (m * x).sum(dim)
            std = torch.sqrt((m * (x - mean.unsqueeze(dim)).pow(2)).sum(dim).clamp(eps))
            return mean, std

        if lengths is None:
            lengths = torch.ones(x.shape[0], device=x.device)
        mask = length_to_mask(lengths * L, max_len=L, device=x.device).unsqueeze(1)
        if self.global_context:
            total = mask.sum(dim=2, keepdim=True).float()
            mean, std = _compute_statistics(x, mask / total)
            attn = torch.cat([x, mean.unsqueeze(2).repeat(1, 1, L), std.unsqueeze(2).repeat(1, 1, L)], dim=1)
        else:
            attn = x
        attn = self.conv(torch.tanh(self.tdnn(attn)))
        attn = attn * mask  # expect: MC520 pooling
        attn = F.softmax(attn, dim=2)
        mean, std = _compute_statistics(x, attn)
        return torch.cat((mean, std), dim=1).unsqueeze(2)


class ECAPA_TDNN(nn.Module):
    def __init__(self, input_size=24, channels=64, lin_neurons=32):
        super().__init__()
        self.block0 = TDNNBlock(input_size, channels, 5, 1)
        self.blocks = nn.ModuleList(SERes2NetBlock(channels, dilation=d) for d in (2, 3, 4))
        self.mfa = TDNNBlock(channels * 3, channels * 3, 1, 1)
        self.asp = AttentiveStatisticsPooling(channels * 3)
        self.asp_bn = nn.BatchNorm1d(channels * 6)
        self.fc = nn.Conv1d(channels * 6, lin_neurons, 1)

    def forward(self, x, lengths=None):
        x = self.block0(x.transpose(1, 2))
        xl = []
        for layer in self.blocks:
            x = layer(x, lengths=lengths)
            xl.append(x)
        x = self.mfa(torch.cat(xl, dim=1))
        x = self.asp_bn(self.asp(x, lengths=lengths))
        return self.fc(x).transpose(1, 2).squeeze(1)


class AAMSoftmax(nn.Module):
    def __init__(self, emb_dim, n_speakers, margin=0.2, scale=30.0):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_speakers, emb_dim) * 0.01)
        self.margin, self.scale = margin, scale

    def forward(self, emb, labels):
        cosine = F.linear(F.normalize(emb), F.normalize(self.weight)).clamp(-1 + 1e-7, 1 - 1e-7)
        target = torch.cos(torch.acos(cosine) + self.margin)
        one_hot = F.one_hot(labels, cosine.size(1)).bool()
        return F.cross_entropy(self.scale * torch.where(one_hot, target, cosine), labels)


def equal_error_rate(scores, labels):
    thresholds = torch.sort(scores).values
    far = torch.stack([((scores >= t) & (labels == 0)).sum() / (labels == 0).sum() for t in thresholds])
    frr = torch.stack([((scores < t) & (labels == 1)).sum() / (labels == 1).sum() for t in thresholds])
    i = torch.argmin((far - frr).abs())
    return ((far[i] + frr[i]) / 2).item()


if __name__ == "__main__":
    torch.manual_seed(0)
    model, head = ECAPA_TDNN(), AAMSoftmax(32, n_speakers=4)
    opt = torch.optim.Adam(list(model.parameters()) + list(head.parameters()), lr=1e-4)
    n_frames = torch.tensor([80, 64, 50, 72, 40, 80])
    feats = torch.randn(6, 80, 24)
    feats = feats * (torch.arange(80)[None, :, None] < n_frames[:, None, None])
    lengths, speakers = n_frames / n_frames.max(), torch.tensor([0, 1, 2, 3, 0, 1])
    for step in range(3):
        loss = head(model(feats, lengths), speakers)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} aam loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        emb = F.normalize(model(feats, lengths))
    pairs = [(0, 4, 1), (1, 5, 1), (0, 1, 0), (2, 3, 0), (4, 5, 0), (0, 5, 0)]
    scores = torch.stack([emb[a] @ emb[b] for a, b, _ in pairs])
    print("trial scores", [round(s, 3) for s in scores.tolist()], "EER", equal_error_rate(scores, torch.tensor([p[2] for p in pairs])))
