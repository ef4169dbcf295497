"""Held-out 10: BertWithPretrained's BERT (Model/BasicBert/Bert.py: `BertSelfAttention` wrapping
nn.MultiheadAttention or the repository's `MyMultiheadAttention`, `BertAttention` handing the
model's `attention_mask` on as `key_padding_mask`, `BertModel`) and a classification task script
that builds the mask from the padded, time-first batch.

Source: mlwithme/BertWithPretrained#17 ("关于attention_mask": why is attention_mask False at the
valid tokens and True at the padding?). In this repository `BertModel.forward`'s attention_mask is
documented as "在padding部分填充True" and reaches nn.MultiheadAttention as `key_padding_mask`, which
hides what is True; the Hugging Face convention the question expects (True/1 at the valid tokens,
`sample != PAD_IDX`) masks every real token and leaves only the padding. The question's
convention is the bug here; the repository's `sample == PAD_IDX` is the twin.
Surroundings: the mask built in the task loop, passed by keyword through `BertModel`,
`BertEncoder`, `BertLayer` and `BertAttention` into the wrapper, whose class is chosen by a
config attribute.
"""

import torch
import torch.nn as nn


class BertConfig(object):
    def __init__(self, vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=128, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                 max_position_embeddings=64, pad_token_id=0, use_torch_multi_head=True):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.pad_token_id = pad_token_id
        self.use_torch_multi_head = use_torch_multi_head


class BertSelfAttention(nn.Module):
    """
    实现多头注意力机制，对应的是GoogleResearch代码中的attention_layer方法
    """

    def __init__(self, config):
        super(BertSelfAttention, self).__init__()
        if 'use_torch_multi_head' in config.__dict__ and config.use_torch_multi_head:
            MultiHeadAttention = nn.MultiheadAttention
        else:
            raise NotImplementedError("MyMultiheadAttention is not part of this excerpt")
        self.multi_head_attention = MultiHeadAttention(embed_dim=config.hidden_size,
                                                       num_heads=config.num_attention_heads,
                                                       dropout=config.attention_probs_dropout_prob)

    def forward(self, query, key, value, attn_mask=None, key_padding_mask=None):
        """
        :param key_padding_mask: [batch_size, src_len] (padding部分为True)
        """
        return self.multi_head_attention(query, key, value, attn_mask=attn_mask, key_padding_mask=key_padding_mask)


class BertAttention(nn.Module):
    def __init__(self, config):
        super(BertAttention, self).__init__()
        self.self = BertSelfAttention(config)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=1e-12)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, attention_mask=None):
        """
        :param hidden_states: [src_len, batch_size, hidden_size]
        :param attention_mask: [batch_size, src_len]
        """
        self_outputs = self.self(hidden_states, hidden_states, hidden_states, attn_mask=None,
                                 key_padding_mask=attention_mask)
        attention_output = self.dropout(self.dense(self_outputs[0]))
        return self.LayerNorm(attention_output + hidden_states)


class BertLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.bert_attention = BertAttention(config)
        self.bert_intermediate = nn.Sequential(nn.Linear(config.hidden_size, config.intermediate_size), nn.GELU())
        self.bert_output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=1e-12)

    def forward(self, hidden_states, attention_mask=None):
        attention_output = self.bert_attention(hidden_states, attention_mask)
        layer_output = self.bert_output(self.bert_intermediate(attention_output))
        return self.LayerNorm(layer_output + attention_output)


class BertEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.bert_layers = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, hidden_states, attention_mask=None):
        all_encoder_layers = []
        layer_output = hidden_states
        for i, layer_module in enumerate(self.bert_layers):
            layer_output = layer_module(layer_output, attention_mask)
            all_encoder_layers.append(layer_output)
        return all_encoder_layers


class BertModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.bert_encoder = BertEncoder(config)
        self.pooler = nn.Sequential(nn.Linear(config.hidden_size, config.hidden_size), nn.Tanh())

    def forward(self, input_ids=None, attention_mask=None, position_ids=None):
        """
        :param input_ids: [src_len, batch_size]
        :param attention_mask: [batch_size, src_len] mask掉padding部分的内容,在padding部分填充True
        """
        src_len = input_ids.size(0)
        if position_ids is None:
            position_ids = torch.arange(src_len, device=input_ids.device)[:, None]
        embedding_output = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        all_encoder_outputs = self.bert_encoder(embedding_output, attention_mask=attention_mask)
        sequence_output = all_encoder_outputs[-1]  # [src_len, batch_size, hidden_size]
        pooled_output = self.pooler(sequence_output[0])
        return pooled_output, all_encoder_outputs


class BertForSentenceClassification(nn.Module):
    def __init__(self, config, num_labels=2):
        super().__init__()
        self.bert = BertModel(config)
        self.classifier = nn.Linear(config.hidden_size, num_labels)

    def forward(self, input_ids, attention_mask=None, labels=None):
        pooled_output, _ = self.bert(input_ids=input_ids, attention_mask=attention_mask)
        logits = self.classifier(pooled_output)
        if labels is not None:
            return nn.CrossEntropyLoss()(logits, labels), logits
        return logits


def evaluate(data_iter, model, device, PAD_IDX):
    model.eval()
    with torch.no_grad():
        acc_sum, n = 0.0, 0
        for x, y in data_iter:
            x, y = x.to(device), y.to(device)
            padding_mask = (x != PAD_IDX).transpose(0, 1)  # expect: MC511|MC502 keyword
            logits = model(x, attention_mask=padding_mask)  # also: MC511
            acc_sum += (logits.argmax(1) == y).float().sum().item()
            n += len(y)
        model.train()
        return acc_sum / n
