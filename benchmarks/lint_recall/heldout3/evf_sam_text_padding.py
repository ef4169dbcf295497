"""Held-out 3: `~` applied to integer 0/1 masks in a referring-segmentation model's text branch and
in a generation helper that infers the attention mask.

Source: hustvl/EVF-SAM#37 (`text_padding_position=~attention_masks` where the inference code builds
the mask as an integer tensor, `torch.zeros_like(input_ids)`), PaddlePaddle/PaddleFormers PR #4033
("fix(generate): replace bit-wise NOT with subtraction for logic NOT": `can_infer_attention_mask` is
an integer 0 or 1, so `~` gives -1 / -2).
Surroundings: a model forward taking the tokenizer's mask, an inference function, a generation
utility with `.long()`.
"""

from typing import Optional

import torch
import torch.nn as nn


class EvfSamModel(nn.Module):
    def __init__(self, beit3: nn.Module, sam_decoder: nn.Module, hidden: int) -> None:
        super().__init__()
        self.beit3 = beit3
        self.decoder = sam_decoder
        self.text_hidden_fcs = nn.Linear(hidden, 256)

    def forward(self, images: torch.Tensor, images_evf: torch.Tensor, input_ids: torch.Tensor,
                attention_masks: torch.Tensor) -> torch.Tensor:
        output = self.beit3(
            visual_tokens=images_evf,
            textual_tokens=input_ids,
            text_padding_position=~attention_masks,  # expect: MC518 forward-param
        )
        feat = self.text_hidden_fcs(output["encoder_out"][:, :1, ...])
        return self.decoder(images, feat)


@torch.no_grad()
def inference(model: EvfSamModel, tokenizer, image: torch.Tensor, image_evf: torch.Tensor, prompt: str) -> torch.Tensor:
    enc = tokenizer(prompt, return_tensors="pt", padding="max_length", max_length=32, truncation=True)
    input_ids = enc["input_ids"].to(image.device)
    text_padding = ~enc["attention_mask"].to(image.device)  # expect: MC518 inference
    output = model.beit3(visual_tokens=image_evf, textual_tokens=input_ids, text_padding_position=text_padding)
    return model.decoder(image, model.text_hidden_fcs(output["encoder_out"][:, :1, ...]))


def prepare_attention_mask_for_generation(inputs: torch.Tensor, pad_token_id: Optional[int],
                                          eos_token_id: Optional[int]) -> torch.Tensor:
    default_attention_mask = torch.ones(inputs.shape[:2], dtype=torch.long, device=inputs.device)
    if pad_token_id is None:
        return default_attention_mask
    is_pad_token_in_inputs = torch.isin(inputs, torch.tensor(pad_token_id, device=inputs.device)).any()
    is_pad_token_not_equal_to_eos = torch.tensor(eos_token_id is None or pad_token_id != eos_token_id, device=inputs.device)
    can_infer_attention_mask = (is_pad_token_in_inputs & is_pad_token_not_equal_to_eos).long()
    attention_mask_from_padding = inputs.ne(pad_token_id).long()
    return (attention_mask_from_padding * can_infer_attention_mask
            + default_attention_mask * ~can_infer_attention_mask)  # expect: MC518 generate
