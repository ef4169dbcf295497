"""Held-out 9: GPT-SoVITS text-to-semantic decoder (`GPT_SoVITS/AR/models/t2s_model.py`
`Text2SemanticDecoder.make_input_data`: the phoneme prefix attends to itself, the semantic tokens
attend to the prefix and causally to each other; the bool mask (True = masked) is padded,
concatenated, OR-ed with the padding mask per head and turned into a float -inf mask).

Source: RVC-Boss/GPT-SoVITS#965 ("这个mask是否有问题？": the report proposes `diagonal=0` for the
semantic-token triangle at t2s_model.py:123 so that "the causal mask includes the current position";
in this mask True means masked, so `triu(ones, diagonal=0)` hides each token's own position, and the
maintainers' test of the change made the model worse; the repository's `diagonal=1` is the twin).
Surroundings: the triangle built inside `F.pad`, concatenated with the prefix block, OR-ed with a
per-head padding mask and converted by `masked_fill_` into the additive mask the encoder gets.
"""

import torch
from torch import nn
from torch.nn import functional as F


def make_pad_mask(lengths: torch.Tensor, max_len: int = 0) -> torch.Tensor:
    """True at the padded positions."""
    assert lengths.ndim == 1, lengths.ndim
    max_len = max(max_len, lengths.max())
    n = lengths.size(0)
    seq_range = torch.arange(0, max_len, device=lengths.device)
    expaned_lengths = seq_range.unsqueeze(0).expand(n, max_len)
    return expaned_lengths >= lengths.unsqueeze(-1)


class Text2SemanticDecoder(nn.Module):
    def __init__(self, config, norm_first=False):
        super(Text2SemanticDecoder, self).__init__()
        self.model_dim = config["model"]["hidden_dim"]
        self.embedding_dim = config["model"]["embedding_dim"]
        self.num_head = config["model"]["head"]
        self.num_layers = config["model"]["n_layer"]
        self.vocab_size = config["model"]["vocab_size"]
        self.phoneme_vocab_size = config["model"]["phoneme_vocab_size"]
        self.EOS = config["model"]["EOS"]
        self.bert_proj = nn.Linear(1024, self.embedding_dim)
        self.ar_text_embedding = nn.Embedding(self.phoneme_vocab_size, self.embedding_dim)
        self.ar_audio_embedding = nn.Embedding(self.vocab_size, self.embedding_dim)
        self.h = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(
                d_model=self.model_dim,
                nhead=self.num_head,
                dim_feedforward=self.model_dim * 4,
                dropout=0.1,
                batch_first=True,
                norm_first=norm_first,
            ),
            num_layers=self.num_layers,
        )
        self.ar_predict_layer = nn.Linear(self.model_dim, self.vocab_size, bias=False)

    def pad_y_eos(self, y, y_mask_int, eos_id):
        targets = F.pad(y, (0, 1), value=0) + eos_id * F.pad(y_mask_int, (0, 1), value=1)
        # 错位
        return targets[:, :-1], targets[:, 1:]

    def make_input_data(self, x, x_lens, y, y_lens, bert_feature):
        x = self.ar_text_embedding(x)
        x = x + self.bert_proj(bert_feature.transpose(1, 2))
        x_mask = make_pad_mask(x_lens)

        y_mask = make_pad_mask(y_lens)
        y_mask_int = y_mask.type(torch.int64)
        codes = y.type(torch.int64) * (1 - y_mask_int)

        # Training
        # AR Decoder
        y, targets = self.pad_y_eos(codes, y_mask_int, eos_id=self.EOS)
        x_len = x_lens.max()
        y_len = y_lens.max()
        y_pos = self.ar_audio_embedding(y)

        xy_padding_mask = torch.concat([x_mask, y_mask], dim=1)
        ar_xy_padding_mask = xy_padding_mask

        x_attn_mask = F.pad(
            torch.zeros((x_len, x_len), dtype=torch.bool, device=x.device),
            (0, y_len),
            value=True,
        )

        y_attn_mask = F.pad(
            torch.triu(
                torch.ones(y_len, y_len, dtype=torch.bool, device=x.device),
                diagonal=0,  # expect: MC503 keyword
            ),
            (x_len, 0),
            value=False,
        )

        xy_attn_mask = torch.concat([x_attn_mask, y_attn_mask], dim=0)
        bsz, src_len = x.shape[0], x_len + y_len
        _xy_padding_mask = (
            ar_xy_padding_mask.view(bsz, 1, 1, src_len)
            .expand(-1, self.num_head, -1, -1)
            .reshape(bsz * self.num_head, 1, src_len)
        )
        xy_attn_mask = xy_attn_mask.logical_or(_xy_padding_mask)
        new_attn_mask = torch.zeros_like(xy_attn_mask, dtype=x.dtype)
        new_attn_mask.masked_fill_(xy_attn_mask, float("-inf"))
        xy_attn_mask = new_attn_mask
        # x 和完整的 y 一次性输入模型
        xy_pos = torch.concat([x, y_pos], dim=1)

        return xy_pos, xy_attn_mask, targets

    def forward(self, x, x_lens, y, y_lens, bert_feature):
        """
        x: phoneme_ids
        y: semantic_ids
        """
        xy_pos, xy_attn_mask, targets = self.make_input_data(x, x_lens, y, y_lens, bert_feature)
        xy_dec = self.h(xy_pos, mask=xy_attn_mask)
        x_len = x_lens.max()
        logits = self.ar_predict_layer(xy_dec[:, x_len:])
        loss = F.cross_entropy(logits.permute(0, 2, 1), targets, reduction="sum")
        return loss
