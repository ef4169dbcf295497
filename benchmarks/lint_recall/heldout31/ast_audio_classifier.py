"""Audio Spectrogram Transformer-style tagger for clips of different lengths: a feature
extractor in the shape of Hugging Face's (``input_values`` and an int32 ``attention_mask``,
``padding_value``, ``pad_to_multiple_of``), frame stacking into patches, [CLS] and distillation
tokens, an ``nn.TransformerEncoder`` over the patches, mean or token pooling chosen by the
config, and a multi-label (AudioSet-style) loss.

Source: conventions.md §1 (HF 2-D attention_mask row, nn.MultiheadAttention row, direction cheat-sheet) and §5 item 1
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ASTConfig:
    num_mel_bins: int = 16
    frame_stack: int = 4
    hidden_size: int = 32
    num_attention_heads: int = 4
    num_hidden_layers: int = 2
    max_patches: int = 64
    num_labels: int = 6
    pooling: str = "mean"


def extract_features(waveforms, hop_length=16, num_mel_bins=16, padding_value=0.0, pad_to_multiple_of=4):
    features = []
    for wav in waveforms:
        frames = wav[: len(wav) // hop_length * hop_length].view(-1, hop_length)
        power = torch.fft.rfft(frames * torch.hann_window(hop_length), dim=-1).abs().pow(2)
        bands = F.adaptive_avg_pool1d(power[:, None, :], num_mel_bins).squeeze(1)
        features.append(torch.log(bands + 1e-6))
    longest = max(f.shape[0] for f in features)
    longest = -(-longest // pad_to_multiple_of) * pad_to_multiple_of
    input_values = torch.full((len(features), longest, num_mel_bins), padding_value)
    attention_mask = torch.zeros(len(features), longest, dtype=torch.int32)
    for i, f in enumerate(features):
        input_values[i, : f.shape[0]] = f
        attention_mask[i, : f.shape[0]] = 1
    return {"input_values": input_values, "attention_mask": attention_mask}


class ASTForAudioClassification(nn.Module):
    def __init__(self, config: ASTConfig):
        super().__init__()
        self.config = config
        d = config.hidden_size
        self.patch_embeddings = nn.Linear(config.num_mel_bins * config.frame_stack, d)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d))
        self.distillation_token = nn.Parameter(torch.zeros(1, 1, d))
        self.position_embeddings = nn.Parameter(torch.randn(1, config.max_patches + 2, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, config.num_attention_heads, 4 * d, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, config.num_hidden_layers, enable_nested_tensor=False)
        self.layernorm = nn.LayerNorm(d)
        self.classifier = nn.Linear(d, config.num_labels)

    def forward(self, input_values, attention_mask=None, labels=None):
        B, T, n_mels = input_values.shape
        patches = input_values.view(B, T // self.config.frame_stack, self.config.frame_stack * n_mels)
        x = self.patch_embeddings(patches)
        if attention_mask is None:
            attention_mask = torch.ones(B, T, dtype=torch.int32, device=input_values.device)
        attention_mask = attention_mask.view(B, -1, self.config.frame_stack).any(dim=-1)
        attention_mask = torch.cat([attention_mask.new_ones(B, 2), attention_mask], dim=1)
        x = torch.cat([self.cls_token.expand(B, -1, -1), self.distillation_token.expand(B, -1, -1), x], dim=1)
        x = x + self.position_embeddings[:, : x.shape[1]]
        x = self.layernorm(self.encoder(x, src_key_padding_mask=attention_mask))  # expect: MC502 astclf
        if self.config.pooling == "mean":
            weights = attention_mask[:, 2:].unsqueeze(-1).to(x.dtype)
            pooled = (x[:, 2:] * weights).sum(dim=1) / weights.sum(dim=1)
        else:
            pooled = (x[:, 0] + x[:, 1]) / 2
        logits = self.classifier(pooled)
        loss = None if labels is None else F.binary_cross_entropy_with_logits(logits, labels)
        return loss, logits


if __name__ == "__main__":
    torch.manual_seed(0)
    model = ASTForAudioClassification(ASTConfig()).eval()
    clips = [torch.randn(640), torch.randn(400)]
    batch = extract_features(clips)
    labels = torch.tensor([[1.0, 0, 0, 1, 0, 0], [0, 1, 0, 0, 0, 1]])
    with torch.no_grad():
        loss, logits = model(**batch, labels=labels)
        print("loss:", loss.item(), "NaN logits:", torch.isnan(logits).any().item())
        alone = model(**extract_features(clips[1:]))[1]
        print("padded clip batched vs alone:", (logits[1] - alone[0]).abs().max().item())
        model.config.pooling = "tokens"
        print("token pooling batched vs alone:", (model(**batch)[1][1] - model(**extract_features(clips[1:]))[1][0]).abs().max().item())
