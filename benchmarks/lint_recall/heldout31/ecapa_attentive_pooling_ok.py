"""ECAPA-TDNN speaker embedding model written the way SpeechBrain writes it
(speechbrain/lobes/models/ECAPA_TDNN.py, speechbrain/dataio/dataio.py): relative lengths in [0, 1],
``length_to_mask``, TDNN blocks, a squeeze-excitation block whose mean skips padded frames,
multi-layer feature aggregation, attentive statistics pooling with global context, and an
additive angular margin (AAM-softmax) speaker classifier.

Source: seed masked_fill_inplace.txt (注意, 总结)
"""
import torch
import torch.nn.functional as F
from torch import nn


def length_to_mask(length, max_len=None, dtype=None, device=None):
    max_len = int(length.max().item()) if max_len is None else max_len
    mask = torch.arange(max_len, device=length.device, dtype=length.dtype).expand(len(length), max_len)
    mask = mask < length.unsqueeze(1)
    return torch.as_tensor(mask, dtype=dtype or length.dtype, device=device or length.device)


class TDNNBlock(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, dilation):
        super().__init__()
        pad = dilation * (kernel_size - 1) // 2
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation, padding=pad)
        self.activation, self.norm = nn.ReLU(), nn.BatchNorm1d(out_channels)

    def forward(self, x):
        return self.norm(self.activation(self.conv(x)))


class SEBlock(nn.Module):
    def __init__(self, in_channels, se_channels):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv1d(in_channels, se_channels, 1), nn.Conv1d(se_channels, in_channels, 1)

    def forward(self, x, lengths=None):
        L = x.shape[-1]
        if lengths is not None:
            mask = length_to_mask(torch.round(lengths * L), max_len=L, device=x.device).unsqueeze(1)
            s = (x * mask).sum(dim=2, keepdim=True) / mask.sum(dim=2, keepdim=True)
        else:
            s = x.mean(dim=2, keepdim=True)
        return torch.sigmoid(self.conv2(torch.relu(self.conv1(s)))) * x


class AttentiveStatisticsPooling(nn.Module):
    def __init__(self, channels, attention_channels=16, global_context=True):
        super().__init__()
        self.eps, self.global_context = 1e-12, global_context
        self.tdnn = TDNNBlock(channels * 3 if global_context else channels, attention_channels, 1, 1)
        self.tanh = nn.Tanh()
        self.conv = nn.Conv1d(attention_channels, channels, kernel_size=1)

    def forward(self, x, lengths=None):
        L = x.shape[-1]

        def _compute_statistics(x, m, dim=2):
            mean = (m * x).sum(dim)
            std = torch.sqrt((m * (x - mean.unsqueeze(dim)).pow(2)).sum(dim).clamp(self.eps))
            return mean, std

        if lengths is None:
            lengths = torch.ones(x.shape[0], device=x.device)
        mask = length_to_mask(torch.round(lengths * L), max_len=L, device=x.device).unsqueeze(1)
        if self.global_context:
            mean, std = _compute_statistics(x, mask / mask.sum(dim=2, keepdim=True))
            attn = torch.cat([x, mean.unsqueeze(2).repeat(1, 1, L), std.unsqueeze(2).repeat(1, 1, L)], dim=1)
        else:
            attn = x
        attn = F.softmax(self.conv(self.tanh(self.tdnn(attn))), dim=2)
        attn = attn.masked_fill(mask == 0, 0.0)
        attn = attn / attn.sum(dim=2, keepdim=True)
        mean, std = _compute_statistics(x, attn)
        return torch.cat((mean, std), dim=1).unsqueeze(2), attn


class ECAPA_TDNN(nn.Module):
    def __init__(self, input_size=24, channels=(32, 32, 32, 96), lin_neurons=16):
        super().__init__()
        self.blocks = nn.ModuleList([TDNNBlock(input_size, channels[0], 5, 1)])
        self.blocks.extend(TDNNBlock(channels[i - 1], channels[i], 3, i + 1) for i in range(1, 3))
        self.se_blocks = nn.ModuleList(SEBlock(c, 8) for c in channels[1:3])
        self.mfa = TDNNBlock(channels[1] + channels[2], channels[3], 1, 1)
        self.asp = AttentiveStatisticsPooling(channels[3])
        self.asp_bn = nn.BatchNorm1d(channels[3] * 2)
        self.fc = nn.Conv1d(channels[3] * 2, lin_neurons, kernel_size=1)

    def forward(self, x, lengths=None):
        x = self.blocks[0](x.transpose(1, 2))
        xl = []
        for block, se in zip(self.blocks[1:], self.se_blocks):
            x = se(block(x), lengths) + x
            xl.append(x)
        x = self.mfa(torch.cat(xl, dim=1))
        x, _ = self.asp(x, lengths)
        return self.fc(self.asp_bn(x)).transpose(1, 2)


class AAMSoftmaxClassifier(nn.Module):
    def __init__(self, input_size=16, out_neurons=5, margin=0.2, scale=30.0):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_neurons, input_size) * 0.1)
        self.margin, self.scale = margin, scale

    def forward(self, emb, labels):
        cosine = F.linear(F.normalize(emb.squeeze(1)), F.normalize(self.weight))
        target = torch.cos(torch.acos(cosine.clamp(-1 + 1e-7, 1 - 1e-7)) + self.margin)
        one_hot = F.one_hot(labels, cosine.shape[1]).bool()
        return F.cross_entropy(self.scale * torch.where(one_hot, target, cosine), labels)


if __name__ == "__main__":
    torch.manual_seed(0)
    model, head = ECAPA_TDNN(), AAMSoftmaxClassifier()
    feats, lens, spk = torch.randn(3, 50, 24), torch.tensor([1.0, 0.7, 0.5]), torch.tensor([0, 3, 1])
    model.eval()
    with torch.no_grad():
        x = torch.randn(3, 96, 50)
        _, weights = model.asp(x, lens)
        print("pooling weight on padded frames:", weights[1, :, 35:].abs().max().item(), weights[2, :, 25:].abs().max().item())
        pooled_alone, _ = model.asp(x[2:, :, :25], None)
        print("pooling batched vs alone:", (model.asp(x, lens)[0][2] - pooled_alone[0]).abs().max().item())
    model.train()
    opt = torch.optim.Adam(list(model.parameters()) + list(head.parameters()), lr=1e-3)
    for step in range(3):
        loss = head(model(feats, lens), spk)
        try:
            opt.zero_grad()
            loss.backward()
            opt.step()
            print("step", step, "loss", round(loss.item(), 4))
        except RuntimeError as err:
            print("backward:", str(err)[:150])
            break
