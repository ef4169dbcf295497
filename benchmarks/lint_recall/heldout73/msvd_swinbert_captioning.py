"""End-to-end video captioning in the SwinBERT layout (MSVD-style clips).

A video Swin-like tube encoder turns sampled frames into video tokens that
are appended to the caption tokens of a BERT-style multimodal transformer
trained with masked language modelling. The tensorizer's attention mask
makes captions causal; video tokens attend among themselves under a
temporal window prior and a learnable sparse attention mask.

Source: seed self_attention_mask_guide.txt §6 (create_block_mask); conventions.md §2.3.
"""
import torch
import torch.nn.functional as F
from torch import nn

PAD_ID, CLS_ID, SEP_ID, MASK_ID = 0, 101, 102, 103
VOCAB_SIZE = 300
NUM_FRAMES, TOKENS_PER_FRAME = 4, 4
MAX_SEQ_LEN = 12
MAX_IMG_SEQ_LEN = NUM_FRAMES * TOKENS_PER_FRAME


def temporal_window_bias(num_frames, tokens_per_frame, window=1):
    n = num_frames * tokens_per_frame
    bias = torch.zeros(n, n)
    for f in range(num_frames):
        lo = max(0, f - window) * tokens_per_frame
        hi = min(num_frames, f + window + 1) * tokens_per_frame
        bias[f * tokens_per_frame:(f + 1) * tokens_per_frame, lo:hi] = 0.0  # expect: MC504 blocks
    bias[bias == 0] = float("-inf")  # also: MC504 blocks
    bias[bias == 1] = 0.0
    return bias


class CaptionTensorizer:
    def __init__(self, max_seq_length=MAX_SEQ_LEN, max_img_seq_length=MAX_IMG_SEQ_LEN, mask_prob=0.3):
        self.max_seq_len = max_seq_length
        self.max_img_seq_len = max_img_seq_length
        self.mask_prob = mask_prob
        self._triangle_mask = torch.tril(torch.ones((max_seq_length, max_seq_length), dtype=torch.long))

    def tokenize(self, caption):
        return [CLS_ID] + [110 + sum(map(ord, w)) % 180 for w in caption.lower().split()][: self.max_seq_len - 2] + [SEP_ID]

    def get_attn_mask(self, seq_len, img_len):
        max_len = self.max_seq_len + self.max_img_seq_len
        attention_mask = torch.zeros((max_len, max_len), dtype=torch.long)
        c_start, c_end = 0, seq_len
        r_start, r_end = self.max_seq_len, self.max_seq_len + img_len
        attention_mask[c_start:c_end, c_start:c_end].copy_(self._triangle_mask[0:seq_len, 0:seq_len])
        attention_mask[r_start:r_end, r_start:r_end] = 1
        attention_mask[c_start:c_end, r_start:r_end] = 1
        return attention_mask

    def tensorize_example(self, caption, generator):
        tokens = self.tokenize(caption)
        seq_len = len(tokens)
        input_ids = torch.full((self.max_seq_len,), PAD_ID, dtype=torch.long)
        input_ids[:seq_len] = torch.tensor(tokens)
        masked_lm_labels = torch.full((self.max_seq_len,), -100, dtype=torch.long)
        candidates = torch.arange(1, seq_len)
        picked = candidates[torch.rand(len(candidates), generator=generator) < self.mask_prob]
        if len(picked) == 0:
            picked = candidates[-1:]
        masked_lm_labels[picked] = input_ids[picked]
        input_ids[picked] = MASK_ID
        return input_ids, self.get_attn_mask(seq_len, self.max_img_seq_len), masked_lm_labels


class VideoTubeEncoder(nn.Module):
    def __init__(self, dim=48):
        super().__init__()
        self.patch_embed = nn.Conv3d(3, dim, kernel_size=(2, 8, 8), stride=(2, 8, 8))
        self.block = nn.TransformerEncoderLayer(dim, 4, dim * 2, dropout=0.0, batch_first=True, norm_first=True)

    def forward(self, frames):
        x = self.patch_embed(frames.transpose(1, 2))
        return self.block(x.flatten(2).transpose(1, 2))


class BertSelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, hidden * 3)
        self.dense = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.ffn = nn.Sequential(nn.Linear(hidden, hidden * 4), nn.GELU(), nn.Linear(hidden * 4, hidden))
        self.ffn_norm = nn.LayerNorm(hidden)

    def forward(self, x, extended_attention_mask):
        b, n, c = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / (c // self.heads) ** 0.5 + extended_attention_mask
        ctx = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, c)
        x = self.norm(x + self.dense(ctx))
        return self.ffn_norm(x + self.ffn(x))


class VideoTransformer(nn.Module):
    def __init__(self, hidden=48, heads=4, layers=2, learn_mask_enabled=True, sparse_mask_soft2hard=False):
        super().__init__()
        self.swin = VideoTubeEncoder(hidden)
        self.img_embedding = nn.Linear(hidden, hidden)
        self.word_embeddings = nn.Embedding(VOCAB_SIZE, hidden, padding_idx=PAD_ID)
        self.position_embeddings = nn.Embedding(MAX_SEQ_LEN, hidden)
        self.layers = nn.ModuleList([BertSelfAttention(hidden, heads) for _ in range(layers)])
        self.cls_head = nn.Linear(hidden, VOCAB_SIZE)
        self.learn_mask_enabled = learn_mask_enabled
        self.sparse_mask_soft2hard = sparse_mask_soft2hard
        self.learn_vid_att = nn.Embedding(MAX_IMG_SEQ_LEN * MAX_IMG_SEQ_LEN, 1)
        self.register_buffer("window_bias", temporal_window_bias(NUM_FRAMES, TOKENS_PER_FRAME), persistent=False)

    def get_loss_sparsity(self, video_attention):
        return torch.mean(torch.abs(video_attention))

    def forward(self, img_feats, input_ids, attention_mask, masked_lm_labels):
        vid_feats = self.img_embedding(self.swin(img_feats))
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        text = self.word_embeddings(input_ids) + self.position_embeddings(positions)[None]
        hidden = torch.cat([text, vid_feats], dim=1)
        attention_mask = attention_mask.float().clone()
        loss_sparsity = hidden.new_zeros(())
        if self.learn_mask_enabled:
            vid_att_len = MAX_IMG_SEQ_LEN
            learn_att = torch.sigmoid(self.learn_vid_att.weight.reshape(vid_att_len, vid_att_len))
            diag_mask = torch.diag(torch.ones(vid_att_len, device=learn_att.device))
            video_attention = (1.0 - diag_mask) * learn_att
            learn_att = diag_mask + video_attention
            if self.sparse_mask_soft2hard:
                learn_att = (learn_att >= 0.5) * 1.0
            attention_mask[:, -vid_att_len:, -vid_att_len:] = learn_att
            loss_sparsity = self.get_loss_sparsity(video_attention)
        extended_attention_mask = ((1.0 - attention_mask) * -10000.0)[:, None]
        video_prior = F.pad(self.window_bias, (MAX_SEQ_LEN, 0, MAX_SEQ_LEN, 0))
        extended_attention_mask = extended_attention_mask + video_prior
        for layer in self.layers:
            hidden = layer(hidden, extended_attention_mask)
        logits = self.cls_head(hidden[:, :MAX_SEQ_LEN])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB_SIZE), masked_lm_labels.reshape(-1), ignore_index=-100)
        return loss, loss_sparsity, logits


if __name__ == "__main__":
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    tensorizer = CaptionTensorizer()
    captions = ["a man is slicing a tomato", "a cat plays with a ball of yarn on the floor", "two kids ride bikes"]
    examples = [tensorizer.tensorize_example(c, gen) for c in captions]
    input_ids, attention_mask, labels = (torch.stack(t) for t in zip(*examples))
    frames = torch.randn(3, NUM_FRAMES * 2, 3, 16, 16)
    model = VideoTransformer()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        loss, loss_sparsity, logits = model(frames, input_ids, attention_mask, labels)
        total = loss + 0.5 * loss_sparsity
        optimizer.zero_grad()
        total.backward()
        optimizer.step()
        print(f"step {step} mlm {loss.item():.4f} sparsity {loss_sparsity.item():.4f}")
    acc = (logits.argmax(-1) == labels)[labels != -100].float().mean().item()
    print("masked token acc", acc)
