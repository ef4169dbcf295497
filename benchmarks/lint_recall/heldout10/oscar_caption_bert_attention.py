"""Held-out 10: Oscar's vision-language BERT (oscar/modeling/modeling_bert.py: `BertImgModel`
turning the text+region attention mask into an extended additive mask, `CaptionBertSelfAttention`
subclassing the pytorch-transformers `BertSelfAttention`, `CaptionBertEncoder`).

Source: microsoft/Oscar#24 ("why attention mask is plus, should it be multiply attention mask?":
the question proposes multiplying the scores by the attention mask; the maintainer answers that
"the attention_mask here is not a 0/1 mask": `BertImgModel` already turned it into 0 for kept and
-10000.0 for masked positions). Multiplied, every kept score becomes 0 and every masked one is
scaled by -10000, so the caption tokens attend to the future and to padding. The proposal is the
bug here; the repository's `attention_scores + attention_mask` is the twin.
Surroundings: the mask made 3-D by the captioning dataset (seq2seq pattern over text and image
regions), extended in the model, carried positionally through the encoder's layers into a
subclass's forward.
"""

import math

import torch
from torch import nn


class BertConfig:
    def __init__(self, hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=128,
                 vocab_size=100, img_feature_dim=32, max_position_embeddings=64,
                 attention_probs_dropout_prob=0.0, output_attentions=False):
        self.__dict__.update(locals())
        del self.__dict__["self"]


class BertSelfAttention(nn.Module):
    def __init__(self, config):
        super(BertSelfAttention, self).__init__()
        self.output_attentions = config.output_attentions
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = int(config.hidden_size / config.num_attention_heads)
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(config.hidden_size, self.all_head_size)
        self.value = nn.Linear(config.hidden_size, self.all_head_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        x = x.view(*new_x_shape)
        return x.permute(0, 2, 1, 3)


class CaptionBertSelfAttention(BertSelfAttention):
    """Modified from BertSelfAttention to add support for output_hidden_states."""

    def __init__(self, config):
        super(CaptionBertSelfAttention, self).__init__(config)

    def forward(self, hidden_states, attention_mask, head_mask=None, history_state=None):
        if history_state is not None:
            x_states = torch.cat([history_state, hidden_states], dim=1)
            mixed_query_layer = self.query(hidden_states)
            mixed_key_layer = self.key(x_states)
            mixed_value_layer = self.value(x_states)
        else:
            mixed_query_layer = self.query(hidden_states)
            mixed_key_layer = self.key(hidden_states)
            mixed_value_layer = self.value(hidden_states)

        query_layer = self.transpose_for_scores(mixed_query_layer)
        key_layer = self.transpose_for_scores(mixed_key_layer)
        value_layer = self.transpose_for_scores(mixed_value_layer)

        # Take the dot product between "query" and "key" to get the raw attention scores.
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        # Apply the attention mask is (precomputed for all layers in BertModel forward() function)
        attention_scores = attention_scores * attention_mask  # expect: MC523 inheritance

        # Normalize the attention scores to probabilities.
        attention_probs = nn.Softmax(dim=-1)(attention_scores)
        attention_probs = self.dropout(attention_probs)
        if head_mask is not None:
            attention_probs = attention_probs * head_mask

        context_layer = torch.matmul(attention_probs, value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
        context_layer = context_layer.view(*new_context_layer_shape)

        outputs = (context_layer, attention_probs) if self.output_attentions else (context_layer,)
        return outputs


class CaptionBertLayer(nn.Module):
    def __init__(self, config):
        super(CaptionBertLayer, self).__init__()
        self.attention = CaptionBertSelfAttention(config)
        self.output = nn.Sequential(nn.Linear(config.hidden_size, config.intermediate_size), nn.GELU(),
                                    nn.Linear(config.intermediate_size, config.hidden_size))
        self.norm1 = nn.LayerNorm(config.hidden_size)
        self.norm2 = nn.LayerNorm(config.hidden_size)

    def forward(self, hidden_states, attention_mask, head_mask=None, history_state=None):
        attention_outputs = self.attention(hidden_states, attention_mask, head_mask, history_state)
        attention_output = self.norm1(attention_outputs[0] + hidden_states)
        layer_output = self.norm2(self.output(attention_output) + attention_output)
        return (layer_output,) + attention_outputs[1:]


class CaptionBertEncoder(nn.Module):
    def __init__(self, config):
        super(CaptionBertEncoder, self).__init__()
        self.layer = nn.ModuleList([CaptionBertLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, hidden_states, attention_mask, head_mask=None, encoder_history_states=None):
        for i, layer_module in enumerate(self.layer):
            history_state = None if encoder_history_states is None else encoder_history_states[i]
            layer_outputs = layer_module(hidden_states, attention_mask, None if head_mask is None else head_mask[i],
                                         history_state)
            hidden_states = layer_outputs[0]
        return (hidden_states,)


class BertImgModel(nn.Module):
    """Expand from BertModel to handle image region features as input"""

    def __init__(self, config):
        super(BertImgModel, self).__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.img_embedding = nn.Linear(config.img_feature_dim, config.hidden_size, bias=True)
        self.encoder = CaptionBertEncoder(config)

    def forward(self, input_ids, img_feats, attention_mask=None, position_ids=None):
        if attention_mask is None:
            attention_mask = torch.ones(input_ids.size(0), input_ids.size(1) + img_feats.size(1))

        # We create a 3D attention mask from a 2D tensor mask.
        # Sizes are [batch_size, 1, 1, to_seq_length]
        # this attention mask is more simple than the triangular masking of causal attention
        # used in OpenAI GPT, we just need to prepare the broadcast dimension here.
        if attention_mask.dim() == 2:
            extended_attention_mask = attention_mask.unsqueeze(1).unsqueeze(2)
        elif attention_mask.dim() == 3:
            extended_attention_mask = attention_mask.unsqueeze(1)
        else:
            raise NotImplementedError

        # Since attention_mask is 1.0 for positions we want to attend and 0.0 for
        # masked positions, this operation will create a tensor which is 0.0 for
        # positions we want to attend and -10000.0 for masked positions.
        extended_attention_mask = extended_attention_mask.to(dtype=next(self.parameters()).dtype)  # fp16 compatibility
        extended_attention_mask = (1.0 - extended_attention_mask) * -10000.0

        if position_ids is None:
            position_ids = torch.arange(input_ids.size(1), dtype=torch.long, device=input_ids.device)[None, :]
        embedding_output = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        img_embedding_output = self.img_embedding(img_feats)
        embedding_output = torch.cat((embedding_output, img_embedding_output), 1)

        encoder_outputs = self.encoder(embedding_output, extended_attention_mask)
        return encoder_outputs[0]


def caption_attention_mask(num_caption_tokens, max_seq_len, num_img_regions, max_img_seq_len):
    """The seq2seq mask of Oscar's CaptionTensorizer: image regions and text see each other, each
    caption token sees only the caption tokens before it."""
    max_len = max_seq_len + max_img_seq_len
    attention_mask = torch.zeros((max_len, max_len), dtype=torch.long)
    c_start, c_end = 0, num_caption_tokens
    l_start, l_end = max_seq_len, max_seq_len + num_img_regions
    attention_mask[c_start:c_end, c_start:c_end].copy_(torch.tril(torch.ones((num_caption_tokens,
                                                                                num_caption_tokens),
                                                                               dtype=torch.long)))
    attention_mask[l_start:l_end, l_start:l_end] = 1
    attention_mask[c_start:c_end, l_start:l_end] = 1
    attention_mask[l_start:l_end, c_start:c_end] = 1
    return attention_mask
