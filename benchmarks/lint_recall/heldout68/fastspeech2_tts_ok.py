"""FastSpeech 2 for an audiobook narrator voice (ming024 layout, phoneme-level prosody).

Phoneme strings come from a tokenizer with a Hugging Face call signature; the FFT
encoder, variance adaptor (duration, pitch and energy predictors with bucketed
embeddings), length regulator and FFT mel decoder follow the reference layout.
Ground-truth durations from a forced aligner drive training.

Source: conventions.md section 1, section 2.4 and section 5 item 7.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

PHONES = ["<pad>"] + "AA AE AH AO AW AY B CH D DH EH ER EY F G HH IH IY JH K L M N NG OW OY P R S SH T TH UH UW V W Y Z ZH sp".split()
N_MEL = 20


class PhonemeTokenizer:
    def __init__(self):
        self.vocab = {p: i for i, p in enumerate(PHONES)}

    def __call__(self, texts, padding=True, return_tensors="pt"):
        ids = [[self.vocab[p] for p in t.split()] for t in texts]
        width = max(map(len, ids))
        input_ids = torch.tensor([x + [0] * (width - len(x)) for x in ids])
        attention_mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids])
        return {"input_ids": input_ids, "attention_mask": attention_mask}


def get_mask_from_lengths(lengths, max_len=None):
    max_len = int(torch.max(lengths).item()) if max_len is None else max_len
    ids = torch.arange(0, max_len, device=lengths.device).unsqueeze(0).expand(lengths.shape[0], -1)
    return ids >= lengths.unsqueeze(1).expand(-1, max_len)


def get_sinusoid_encoding_table(n_position, d_hid):
    angle = np.array([[pos / np.power(10000, 2 * (j // 2) / d_hid) for j in range(d_hid)] for pos in range(n_position)])
    angle[:, 0::2], angle[:, 1::2] = np.sin(angle[:, 0::2]), np.cos(angle[:, 1::2])
    return torch.FloatTensor(angle)


class MultiHeadAttention(nn.Module):
    def __init__(self, n_head, d_model, d_k):
        super().__init__()
        self.n_head, self.d_k = n_head, d_k
        self.w_qs, self.w_ks, self.w_vs = (nn.Linear(d_model, n_head * d_k) for _ in range(3))
        self.layer_norm, self.fc = nn.LayerNorm(d_model), nn.Linear(n_head * d_k, d_model)

    def forward(self, x, mask):
        sz_b, len_q, _ = x.size()
        q, k, v = (w(x).view(sz_b, len_q, self.n_head, self.d_k).permute(2, 0, 1, 3).reshape(-1, len_q, self.d_k) for w in (self.w_qs, self.w_ks, self.w_vs))
        attn = torch.bmm(q, k.transpose(1, 2)) / np.power(self.d_k, 0.5)
        attn = attn.masked_fill(mask.repeat(self.n_head, 1, 1), -np.inf)
        output = torch.bmm(torch.softmax(attn, dim=2), v)
        output = output.view(self.n_head, sz_b, len_q, self.d_k).permute(1, 2, 0, 3).reshape(sz_b, len_q, -1)
        return self.layer_norm(self.fc(output) + x)


class FFTBlock(nn.Module):
    def __init__(self, d_model, n_head, d_inner, kernel_size=(9, 1)):
        super().__init__()
        self.slf_attn = MultiHeadAttention(n_head, d_model, d_model // n_head)
        self.w_1 = nn.Conv1d(d_model, d_inner, kernel_size[0], padding=(kernel_size[0] - 1) // 2)
        self.w_2 = nn.Conv1d(d_inner, d_model, kernel_size[1], padding=(kernel_size[1] - 1) // 2)
        self.layer_norm = nn.LayerNorm(d_model)

    def forward(self, x, mask, slf_attn_mask):
        x = self.slf_attn(x, slf_attn_mask).masked_fill(mask.unsqueeze(-1), 0)
        x = self.layer_norm(self.w_2(F.relu(self.w_1(x.transpose(1, 2)))).transpose(1, 2) + x)
        return x.masked_fill(mask.unsqueeze(-1), 0)


class FFTStack(nn.Module):
    def __init__(self, d_model=48, n_head=2, layers=2, n_position=256):
        super().__init__()
        self.register_buffer("position_enc", get_sinusoid_encoding_table(n_position, d_model).unsqueeze(0), persistent=False)
        self.layer_stack = nn.ModuleList(FFTBlock(d_model, n_head, 2 * d_model) for _ in range(layers))

    def forward(self, x, mask):
        slf_attn_mask = mask.unsqueeze(1).expand(-1, x.size(1), -1)
        x = x + self.position_enc[:, : x.size(1)]
        for layer in self.layer_stack:
            x = layer(x, mask, slf_attn_mask)
        return x


class VariancePredictor(nn.Module):
    def __init__(self, d=48, k=3):
        super().__init__()
        self.conv1, self.ln1 = nn.Conv1d(d, d, k, padding=1), nn.LayerNorm(d)
        self.conv2, self.ln2 = nn.Conv1d(d, d, k, padding=1), nn.LayerNorm(d)
        self.linear_layer = nn.Linear(d, 1)

    def forward(self, x, mask):
        x = self.ln1(F.relu(self.conv1(x.transpose(1, 2))).transpose(1, 2))
        x = self.ln2(F.relu(self.conv2(x.transpose(1, 2))).transpose(1, 2))
        return self.linear_layer(x).squeeze(-1).masked_fill(mask, 0.0)


def length_regulator(x, durations, max_len):
    output = [torch.repeat_interleave(x[b], durations[b].long(), dim=0) for b in range(x.size(0))]
    mel_len = torch.tensor([o.size(0) for o in output])
    return torch.stack([F.pad(o, (0, 0, 0, max_len - o.size(0))) for o in output]), mel_len


class FastSpeech2(nn.Module):
    def __init__(self, d=48, n_bins=16):
        super().__init__()
        self.src_word_emb = nn.Embedding(len(PHONES), d, padding_idx=0)
        self.encoder, self.decoder = FFTStack(d), FFTStack(d)
        self.duration_predictor, self.pitch_predictor, self.energy_predictor = VariancePredictor(d), VariancePredictor(d), VariancePredictor(d)
        self.register_buffer("bins", torch.linspace(-2.0, 2.0, n_bins - 1), persistent=False)
        self.pitch_embedding, self.energy_embedding = nn.Embedding(n_bins, d), nn.Embedding(n_bins, d)
        self.mel_linear = nn.Linear(d, N_MEL)

    def forward(self, src_ids, src_masks, mel_lens, max_mel_len, p_targets, e_targets, d_targets):
        x = self.encoder(self.src_word_emb(src_ids), src_masks)
        log_d_prediction = self.duration_predictor(x, src_masks)
        p_prediction, e_prediction = self.pitch_predictor(x, src_masks), self.energy_predictor(x, src_masks)
        x = x + self.pitch_embedding(torch.bucketize(p_targets, self.bins)) + self.energy_embedding(torch.bucketize(e_targets, self.bins))
        x, mel_len = length_regulator(x, d_targets, max_mel_len)
        mel_masks = get_mask_from_lengths(mel_lens, max_mel_len)
        output = self.mel_linear(self.decoder(x, mel_masks))
        return output, p_prediction, e_prediction, log_d_prediction, mel_masks


def collate(tokenizer, texts, durations):
    enc = tokenizer(texts, padding=True, return_tensors="pt")
    d = torch.zeros_like(enc["input_ids"])
    for i, dur in enumerate(durations):
        d[i, : len(dur)] = torch.tensor(dur)
    src_masks = enc["attention_mask"] == 0
    return {"src_ids": enc["input_ids"], "src_masks": src_masks, "d_targets": d, "mel_lens": d.sum(1)}


def to_device(batch, device):
    out = {k: v.to(device) for k, v in batch.items()}
    out["src_masks"] = out["src_masks"].to(torch.bool)
    return out


def fastspeech2_loss(outputs, mels, batch, p_targets, e_targets):
    mel_pred, p_pred, e_pred, log_d_pred, mel_masks = outputs
    src_keep, mel_keep = ~batch["src_masks"], ~mel_masks
    log_d_targets = torch.log(batch["d_targets"].float() + 1)
    mel_loss = F.l1_loss(mel_pred.masked_select(mel_keep.unsqueeze(-1)), mels.masked_select(mel_keep.unsqueeze(-1)))
    p_loss = F.mse_loss(p_pred.masked_select(src_keep), p_targets.masked_select(src_keep))
    e_loss = F.mse_loss(e_pred.masked_select(src_keep), e_targets.masked_select(src_keep))
    d_loss = F.mse_loss(log_d_pred.masked_select(src_keep), log_d_targets.masked_select(src_keep))
    return mel_loss + p_loss + e_loss + d_loss, (mel_loss, p_loss, e_loss, d_loss)


if __name__ == "__main__":
    torch.manual_seed(0)
    model, tokenizer = FastSpeech2(), PhonemeTokenizer()
    texts = ["HH AH L OW sp W ER L D", "G UH D B AY", "Y EH S"]
    durations = [[2, 3, 2, 4, 1, 3, 2, 2, 3], [3, 2, 2, 3, 4], [2, 4, 3]]
    batch = to_device(collate(tokenizer, texts, durations), "cpu")
    max_mel_len = int(batch["mel_lens"].max())
    mels = torch.randn(3, max_mel_len, N_MEL)
    p_targets, e_targets = torch.randn(batch["src_ids"].shape), torch.randn(batch["src_ids"].shape)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(2):
        outputs = model(batch["src_ids"], batch["src_masks"], batch["mel_lens"], max_mel_len, p_targets, e_targets, batch["d_targets"])
        total, parts = fastspeech2_loss(outputs, mels, batch, p_targets, e_targets)
        opt.zero_grad()
        total.backward()
        opt.step()
        print(f"step {step} total {total.item():.4f} mel {parts[0].item():.4f} duration {parts[3].item():.4f}")
