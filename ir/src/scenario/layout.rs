//! Megatron-Core's pipeline layout strings (`pipeline_model_parallel_layout`,
//! NVIDIA/Megatron-LM@d98e8a64dd megatron/core/transformer/pipeline_parallel_layer_layout.py):
//! the virtual stages in pipeline order separated by `|`; in each, `E` the embedding, `t` a
//! transformer layer, `m` a multi-token prediction module and `L` the loss; `(...)*n` repeats
//! what the parentheses hold and `x*n` one letter (or `|`), and commas are cosmetic, as
//! Megatron-Core's `parse_str_to_list` reads them. DeepSeek-V3's published layout on 8 stages
//! of 4 chunks is `Et|(tt|)*30mL`. twin reads one into `layer_partition` and checks that the
//! embedding opens the first stage and the modules and the loss close the last.

/// What one virtual stage of a layout holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LayoutStage {
    pub layers: u32,
    pub embedding: bool,
    pub mtp: u32,
    pub loss: bool,
}

/// Largest repetition count accepted (a layout names at most a few thousand stages).
const MAX_REPEAT: usize = 4096;

/// The stages of `text`, or why it is not a layout.
pub fn parse_layout(text: &str) -> Result<Vec<LayoutStage>, String> {
    let expanded = expand(text)?;
    let mut stages = Vec::new();
    for part in expanded.split('|') {
        let mut stage = LayoutStage::default();
        for c in part.chars() {
            match c {
                't' => stage.layers += 1,
                'E' => stage.embedding = true,
                'm' => stage.mtp += 1,
                'L' => stage.loss = true,
                _ => return Err(format!("`{c}` is not a layout letter")),
            }
        }
        stages.push(stage);
    }
    Ok(stages)
}

/// `(...)*n` repetitions written out, nested ones too.
fn expand(text: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '(' => {
                let mut depth = 1;
                let mut end = None;
                for (j, d) in chars.by_ref() {
                    match d {
                        '(' => depth += 1,
                        ')' => {
                            depth -= 1;
                            if depth == 0 {
                                end = Some(j);
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                let end = end.ok_or("a `(` without its `)`")?;
                let inner = expand(text.get(i + 1..end).unwrap_or(""))?;
                push_repeated(&mut out, &inner, repetition(&mut chars)?)?;
            }
            ')' => return Err("a `)` without its `(`".to_string()),
            'E' | 't' | 'm' | 'L' | '|' => {
                let times = repetition(&mut chars)?;
                push_repeated(&mut out, c.encode_utf8(&mut [0; 4]), times)?;
            }
            ',' => {}
            c if c.is_whitespace() => {}
            c => {
                return Err(format!(
                    "`{c}` is not a layout letter (E, t, m, L, |, (...)*n, x*n)"
                ))
            }
        }
    }
    Ok(out)
}

/// The `*n` after a letter or a `)`, consumed: 1 when there is none.
fn repetition(chars: &mut std::iter::Peekable<std::str::CharIndices>) -> Result<usize, String> {
    if chars.peek().map(|&(_, c)| c) != Some('*') {
        return Ok(1);
    }
    chars.next();
    let mut digits = String::new();
    while let Some(&(_, d)) = chars.peek() {
        if !d.is_ascii_digit() {
            break;
        }
        digits.push(d);
        chars.next();
    }
    digits
        .parse()
        .ok()
        .filter(|&n: &usize| (1..=MAX_REPEAT).contains(&n))
        .ok_or(format!("a repetition `*n` needs n from 1 to {MAX_REPEAT}"))
}

fn push_repeated(out: &mut String, what: &str, times: usize) -> Result<(), String> {
    if out.len().saturating_add(what.len().saturating_mul(times)) > 1 << 20 {
        return Err("the layout is too long".to_string());
    }
    out.push_str(&what.repeat(times));
    Ok(())
}

/// Why a layout's stages do not fit a model of `mtp_layers` modules, if they do not: the
/// embedding must open the first stage and only it, the loss close the last and only it, and
/// the modules sit in the last stage, as many as the model has.
pub fn check_layout(stages: &[LayoutStage], mtp_layers: u32) -> Result<(), String> {
    let last = stages.len().saturating_sub(1);
    for (i, s) in stages.iter().enumerate() {
        if s.embedding && i != 0 {
            return Err(format!("stage {i} holds the embedding; only the first may"));
        }
        if s.loss && i != last {
            return Err(format!("stage {i} holds the loss; only the last may"));
        }
        if s.mtp > 0 && i != last {
            return Err(format!(
                "stage {i} holds multi-token prediction modules; only the last may"
            ));
        }
    }
    let (first, end) = match (stages.first(), stages.last()) {
        (Some(f), Some(e)) => (f, e),
        _ => return Err("the layout is empty".to_string()),
    };
    if !first.embedding || !end.loss {
        return Err("the first stage must hold the embedding (E) and the last the loss (L)".into());
    }
    if end.mtp != mtp_layers {
        return Err(format!(
            "the layout has {} multi-token prediction module(s) (m), the model {mtp_layers} \
             (model.mtp_layers)",
            end.mtp
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deepseek_v3_layout_is_32_stages() {
        let stages = parse_layout("Et|(tt|)*30mL").unwrap();
        assert_eq!(stages.len(), 32);
        let layers: Vec<u32> = stages.iter().map(|s| s.layers).collect();
        assert_eq!(layers.iter().sum::<u32>(), 61);
        assert_eq!((layers[0], layers[1], layers[31]), (1, 2, 0));
        assert!(stages[0].embedding && stages[31].loss && stages[31].mtp == 1);
        assert_eq!(check_layout(&stages, 1), Ok(()));
        assert!(check_layout(&stages, 0).is_err());
    }

    #[test]
    fn nested_repetitions_and_refusals() {
        let stages = parse_layout("E|((t|)*2tt|)*2L").unwrap();
        let layers: Vec<u32> = stages.iter().map(|s| s.layers).collect();
        assert_eq!(layers, vec![0, 1, 1, 2, 1, 1, 2, 0]);
        assert_eq!(check_layout(&stages, 0), Ok(()));
        for bad in [
            "Et|(tt|*2L",
            "Et|tt)|L",
            "Et|tx|L",
            "Et|(t|)*0L",
            "Et|(t|)*99999L",
        ] {
            assert!(parse_layout(bad).is_err(), "{bad}");
        }
        let moved = parse_layout("t|Et|L").unwrap();
        assert!(parse_layout("Et|t*0|L").is_err());
        assert!(check_layout(&moved, 0)
            .unwrap_err()
            .contains("only the first"));
    }

    /// A letter's own repetition and cosmetic commas, as in the layout NVIDIA's MoE report
    /// gives for DeepSeek-V3 on H100 (arXiv:2603.07685, section 9.2.2): `Et*3|(tt|)*29m|L`
    /// is 32 stages, 3 layers in the first and the modules apart from the loss.
    #[test]
    fn single_letter_repetitions_and_commas() {
        let stages = parse_layout("Et*3|(tt|)*29m|L").unwrap();
        assert_eq!(stages.len(), 32);
        assert_eq!(stages[0].layers, 3);
        assert_eq!(stages.iter().map(|s| s.layers).sum::<u32>(), 61);
        assert_eq!((stages[30].mtp, stages[30].loss), (1, false));
        assert!(stages[31].loss && stages[31].layers == 0);
        assert_eq!(parse_layout("Ettt|(tt|)*29,m|L").unwrap(), stages);
        assert_eq!(parse_layout("E|t*2|L").unwrap()[1].layers, 2);
    }
}
