"""Held-out 9: SASRec, self-attentive sequential recommendation (pmixer/SASRec.pytorch
`model.py`: item and position embeddings, `nn.MultiheadAttention` blocks in time-first layout,
a timeline mask for the padding item 0 and a causal `attn_mask`).

Source: pmixer/SASRec.pytorch#6 ("Doubt about the attention_mask": the question proposes
`attention_mask = torch.tril(torch.ones((tl, tl), dtype=torch.float))` instead of
`~torch.tril(torch.ones(..., dtype=torch.bool))`; it is what the repository itself had before commit
aab3261 "fixed attn_mask issue" -- a float 0/1 `attn_mask` is added to the scores by
nn.MultiheadAttention, so the lower triangle gets +1 and the future is not masked at all).
Surroundings: the mask rebuilt in both `forward` (training) and `predict` (inference) from the
numpy batch's length, handed to every `nn.MultiheadAttention` of a ModuleList by keyword.
"""

import numpy as np
import torch


class PointWiseFeedForward(torch.nn.Module):
    def __init__(self, hidden_units, dropout_rate):
        super(PointWiseFeedForward, self).__init__()
        self.conv1 = torch.nn.Conv1d(hidden_units, hidden_units, kernel_size=1)
        self.dropout1 = torch.nn.Dropout(p=dropout_rate)
        self.conv2 = torch.nn.Conv1d(hidden_units, hidden_units, kernel_size=1)
        self.dropout2 = torch.nn.Dropout(p=dropout_rate)

    def forward(self, inputs):
        outputs = self.dropout2(self.conv2(self.dropout1(self.conv1(inputs.transpose(-1, -2)))))
        outputs = outputs.transpose(-1, -2)  # as Conv1D requires (N, C, Length)
        outputs += inputs
        return outputs


class SASRec(torch.nn.Module):
    def __init__(self, user_num, item_num, args):
        super(SASRec, self).__init__()
        self.user_num = user_num
        self.item_num = item_num
        self.dev = args.device

        self.item_emb = torch.nn.Embedding(self.item_num + 1, args.hidden_units, padding_idx=0)
        self.pos_emb = torch.nn.Embedding(args.maxlen, args.hidden_units)
        self.emb_dropout = torch.nn.Dropout(p=args.dropout_rate)

        self.attention_layernorms = torch.nn.ModuleList()  # to be Q for self-attention
        self.attention_layers = torch.nn.ModuleList()
        self.forward_layernorms = torch.nn.ModuleList()
        self.forward_layers = torch.nn.ModuleList()

        self.last_layernorm = torch.nn.LayerNorm(args.hidden_units, eps=1e-8)

        for _ in range(args.num_blocks):
            self.attention_layernorms.append(torch.nn.LayerNorm(args.hidden_units, eps=1e-8))
            self.attention_layers.append(
                torch.nn.MultiheadAttention(args.hidden_units, args.num_heads, args.dropout_rate)
            )
            self.forward_layernorms.append(torch.nn.LayerNorm(args.hidden_units, eps=1e-8))
            self.forward_layers.append(PointWiseFeedForward(args.hidden_units, args.dropout_rate))

    def log2feats(self, log_seqs, attention_mask, timeline_mask):
        seqs = self.item_emb(torch.LongTensor(log_seqs).to(self.dev))
        positions = np.tile(np.array(range(log_seqs.shape[1])), [log_seqs.shape[0], 1])
        seqs += self.pos_emb(torch.LongTensor(positions).to(self.dev))
        seqs = self.emb_dropout(seqs)
        seqs *= ~timeline_mask.unsqueeze(-1)  # broadcast in last dim

        for i in range(len(self.attention_layers)):
            # Self-attention, Q=layernorm(seqs), K=V=seqs
            seqs = torch.transpose(seqs, 0, 1)  # (N, T, C) -> (T, N, C)
            Q = self.attention_layernorms[i](seqs)  # PyTorch mha requires time first fmt
            seqs, _ = self.attention_layers[i](Q, seqs, seqs,
                                               attn_mask=attention_mask)
            seqs = torch.transpose(seqs, 0, 1)  # (T, N, C) -> (N, T, C)

            # Point-wise Feed-forward, actually 2 Conv1D for channel wise fusion
            seqs = self.forward_layernorms[i](seqs)
            seqs = self.forward_layers[i](seqs)
            seqs *= ~timeline_mask.unsqueeze(-1)

        return self.last_layernorm(seqs)  # (U, T, C)

    def forward(self, user_ids, log_seqs, pos_seqs, neg_seqs):  # for training
        # mask 0th items(placeholder for dry-run) in log_seqs
        timeline_mask = torch.BoolTensor(log_seqs == 0).to(self.dev)
        tl = log_seqs.shape[1]  # time dim len for enforce causality
        attention_mask = torch.tril(torch.ones((tl, tl), dtype=torch.float, device=self.dev))  # expect: MC508 helper
        log_feats = self.log2feats(log_seqs, attention_mask, timeline_mask)  # also: MC508

        pos_embs = self.item_emb(torch.LongTensor(pos_seqs).to(self.dev))
        neg_embs = self.item_emb(torch.LongTensor(neg_seqs).to(self.dev))
        pos_logits = (log_feats * pos_embs).sum(dim=-1)
        neg_logits = (log_feats * neg_embs).sum(dim=-1)
        return pos_logits, neg_logits

    def predict(self, user_ids, log_seqs, item_indices):  # for inference
        timeline_mask = torch.BoolTensor(log_seqs == 0).to(self.dev)
        tl = log_seqs.shape[1]
        attention_mask = torch.tril(torch.ones((tl, tl), dtype=torch.float, device=self.dev))  # expect: MC508 helper
        log_feats = self.log2feats(log_seqs, attention_mask, timeline_mask)  # also: MC508

        final_feat = log_feats[:, -1, :]  # only use last QKV classifier
        item_embs = self.item_emb(torch.LongTensor(item_indices).to(self.dev))  # (U, I, C)
        logits = item_embs.matmul(final_feat.unsqueeze(-1)).squeeze(-1)
        return logits  # preds # (U, I)
