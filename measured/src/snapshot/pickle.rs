//! A decoder for the subset of Python's pickle format that plain data uses: `None`, bools,
//! ints, floats, str, bytes, lists, tuples, sets and dicts, with the memo (shared objects).
//!
//! Why not `serde_pickle::value_from_slice`: serde-pickle 1.2.0 counts memo references to
//! avoid cloning, and its count goes wrong when a memoized container holding memo references
//! is itself referenced more than once (birkenfeld/serde-pickle pull request #24, open). A
//! `torch.cuda.memory._snapshot()` pickle shares its frame dicts and strings across thousands
//! of trace entries, and serde-pickle fails on the fixture with "recursive structure found"
//! (or, with `replace_recursive_structures`, silently replaces shared strings by `None`). It
//! would also copy every shared frame once per reference.
//!
//! Here the decoded objects live in an arena and the memo, the stack and containers hold
//! [`Val`]s, which are cheap to clone (a container is an index into the arena, a string an
//! `Rc<str>`): a shared object is stored once, however often it is referenced, and nothing
//! recurses, so no input can overflow the stack or multiply memory through the memo.
//! Opcodes are those of CPython's Lib/pickletools.py (protocols 0-5, binary forms); opcodes
//! that build class instances (GLOBAL, REDUCE, BUILD, ...) and the text forms of protocol 0
//! are refused: a snapshot holds none.

use std::collections::HashMap;
use std::rc::Rc;

/// A decoded value. Containers are indices into [`Arena::objs`].
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    None,
    Bool(bool),
    Int(i64),
    /// An integer that does not fit in an i64 (its magnitude is not kept).
    BigInt,
    Float(f64),
    Str(Rc<str>),
    Bytes(Rc<[u8]>),
    Obj(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjKind {
    List,
    Tuple,
    Set,
    Dict,
}

/// A container: a list, tuple or set holds `items`; a dict holds `entries`.
#[derive(Debug, Clone, PartialEq)]
pub struct Obj {
    pub kind: ObjKind,
    pub items: Vec<Val>,
    pub entries: Vec<(Val, Val)>,
}

/// The decoded containers; `root` is the pickled value.
#[derive(Debug, Default)]
pub struct Arena {
    pub objs: Vec<Obj>,
}

impl Arena {
    pub fn obj(&self, v: &Val) -> Option<&Obj> {
        match v {
            Val::Obj(i) => self.objs.get(*i),
            _ => None,
        }
    }

    pub fn push(&mut self, kind: ObjKind, items: Vec<Val>, entries: Vec<(Val, Val)>) -> Val {
        let id = self.objs.len();
        self.objs.push(Obj {
            kind,
            items,
            entries,
        });
        Val::Obj(id)
    }

    /// What kind of value `v` is, for error messages.
    pub fn kind(&self, v: &Val) -> &'static str {
        match v {
            Val::None => "None",
            Val::Bool(_) => "a bool",
            Val::Int(_) | Val::BigInt => "an integer",
            Val::Float(_) => "a float",
            Val::Str(_) => "a string",
            Val::Bytes(_) => "bytes",
            Val::Obj(_) => match self.obj(v).map(|o| o.kind) {
                Some(ObjKind::List) => "a list",
                Some(ObjKind::Tuple) => "a tuple",
                Some(ObjKind::Set) => "a set",
                Some(ObjKind::Dict) => "a dict",
                None => "a dangling reference",
            },
        }
    }
}

/// Decodes one pickle. The error is a message for the caller to wrap with the file's name.
pub fn decode(data: &[u8]) -> Result<(Arena, Val), String> {
    Machine {
        data,
        pos: 0,
        arena: Arena::default(),
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
    }
    .run()
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    arena: Arena,
    stack: Vec<Val>,
    /// Stack lengths at each MARK.
    marks: Vec<usize>,
    memo: HashMap<u64, Val>,
}

impl<'a> Machine<'a> {
    fn take(&mut self, n: u64) -> Result<&'a [u8], String> {
        let data = self.data;
        let start = self.pos;
        let n = usize::try_from(n).map_err(|_| format!("length {n} too large at byte {start}"))?;
        let end = start
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or_else(|| format!("truncated: {n} bytes wanted at byte {start}"))?;
        self.pos = end;
        data.get(start..end)
            .ok_or_else(|| format!("truncated at byte {start}"))
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?.first().copied().unwrap_or(0))
    }

    fn le<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let at = self.pos;
        <[u8; N]>::try_from(self.take(N as u64)?).map_err(|_| format!("truncated at byte {at}"))
    }

    fn pop(&mut self) -> Result<Val, String> {
        if self.marks.last().is_some_and(|&m| self.stack.len() <= m) {
            return Err(format!("pop across a MARK at byte {}", self.pos));
        }
        self.stack
            .pop()
            .ok_or_else(|| format!("stack underflow at byte {}", self.pos))
    }

    fn pop_mark(&mut self) -> Result<Vec<Val>, String> {
        let m = self
            .marks
            .pop()
            .ok_or_else(|| format!("no MARK at byte {}", self.pos))?;
        if m > self.stack.len() {
            return Err(format!("stack underflow at byte {}", self.pos));
        }
        Ok(self.stack.split_off(m))
    }

    fn top_obj(&mut self) -> Result<&mut Obj, String> {
        let pos = self.pos;
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(format!("no container on the stack at byte {pos}"));
        }
        match self.stack.last() {
            Some(Val::Obj(i)) => {
                let i = *i;
                self.arena
                    .objs
                    .get_mut(i)
                    .ok_or_else(|| format!("dangling object at byte {pos}"))
            }
            _ => Err(format!("not a container on the stack at byte {pos}")),
        }
    }

    fn append(&mut self, mut vals: Vec<Val>) -> Result<(), String> {
        let pos = self.pos;
        let o = self.top_obj()?;
        match o.kind {
            ObjKind::List | ObjKind::Set => {
                o.items.append(&mut vals);
                Ok(())
            }
            _ => Err(format!("append to a non-list at byte {pos}")),
        }
    }

    fn set_items(&mut self, vals: Vec<Val>) -> Result<(), String> {
        let pos = self.pos;
        if !vals.len().is_multiple_of(2) {
            return Err(format!("odd number of dict items at byte {pos}"));
        }
        let o = self.top_obj()?;
        if o.kind != ObjKind::Dict {
            return Err(format!("set items of a non-dict at byte {pos}"));
        }
        // Entries are kept in order; a later one with an equal key wins on lookup, as in
        // Python (`get` in snapshot/mod.rs looks from the end), and inserting stays O(1).
        let mut it = vals.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            o.entries.push((k, v));
        }
        Ok(())
    }

    fn memo_put(&mut self, id: u64) -> Result<(), String> {
        let v = self
            .stack
            .last()
            .cloned()
            .ok_or_else(|| format!("memoize with an empty stack at byte {}", self.pos))?;
        self.memo.insert(id, v);
        Ok(())
    }

    fn memo_get(&mut self, id: u64) -> Result<(), String> {
        let v = self
            .memo
            .get(&id)
            .cloned()
            .ok_or_else(|| format!("memo {id} is not set at byte {}", self.pos))?;
        self.stack.push(v);
        Ok(())
    }

    fn string(&mut self, n: u64) -> Result<(), String> {
        let b = self.take(n)?;
        let s = String::from_utf8_lossy(b);
        self.stack.push(Val::Str(Rc::from(s.as_ref())));
        Ok(())
    }

    fn bytes(&mut self, n: u64) -> Result<(), String> {
        let b: Rc<[u8]> = Rc::from(self.take(n)?);
        self.stack.push(Val::Bytes(b));
        Ok(())
    }

    fn tuple(&mut self, items: Vec<Val>) {
        let v = self.arena.push(ObjKind::Tuple, items, Vec::new());
        self.stack.push(v);
    }

    fn run(mut self) -> Result<(Arena, Val), String> {
        loop {
            let at = self.pos;
            let op = self
                .u8()
                .map_err(|_| format!("truncated: no STOP opcode by byte {at}"))?;
            match op {
                0x80 => {
                    self.u8()?; // PROTO n
                }
                0x95 => {
                    self.take(8)?; // FRAME length
                }
                b'.' => {
                    let v = self.pop()?;
                    return Ok((self.arena, v));
                }
                b'(' => self.marks.push(self.stack.len()),
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let v = self.stack.last().cloned().ok_or("DUP with an empty stack")?;
                    self.stack.push(v);
                }
                b'N' => self.stack.push(Val::None),
                0x88 => self.stack.push(Val::Bool(true)),
                0x89 => self.stack.push(Val::Bool(false)),
                b'J' => {
                    let v = i32::from_le_bytes(self.le::<4>()?);
                    self.stack.push(Val::Int(i64::from(v)));
                }
                b'K' => {
                    let v = self.u8()?;
                    self.stack.push(Val::Int(i64::from(v)));
                }
                b'M' => {
                    let v = u16::from_le_bytes(self.le::<2>()?);
                    self.stack.push(Val::Int(i64::from(v)));
                }
                0x8a => {
                    let n = u64::from(self.u8()?);
                    let b = self.take(n)?;
                    let v = long_le(b);
                    self.stack.push(v);
                }
                0x8b => {
                    let n = i32::from_le_bytes(self.le::<4>()?);
                    let n = u64::try_from(n).map_err(|_| format!("negative LONG4 length at byte {at}"))?;
                    let b = self.take(n)?;
                    let v = long_le(b);
                    self.stack.push(v);
                }
                b'G' => {
                    let v = f64::from_be_bytes(self.le::<8>()?);
                    self.stack.push(Val::Float(v));
                }
                b'X' | b'T' => {
                    let n = u32::from_le_bytes(self.le::<4>()?);
                    self.string(u64::from(n))?;
                }
                0x8c | b'U' => {
                    let n = self.u8()?;
                    self.string(u64::from(n))?;
                }
                0x8d => {
                    let n = u64::from_le_bytes(self.le::<8>()?);
                    self.string(n)?;
                }
                b'B' => {
                    let n = u32::from_le_bytes(self.le::<4>()?);
                    self.bytes(u64::from(n))?;
                }
                b'C' => {
                    let n = self.u8()?;
                    self.bytes(u64::from(n))?;
                }
                0x8e => {
                    let n = u64::from_le_bytes(self.le::<8>()?);
                    self.bytes(n)?;
                }
                b']' => {
                    let v = self.arena.push(ObjKind::List, Vec::new(), Vec::new());
                    self.stack.push(v);
                }
                b'l' => {
                    let items = self.pop_mark()?;
                    let v = self.arena.push(ObjKind::List, items, Vec::new());
                    self.stack.push(v);
                }
                b'a' => {
                    let v = self.pop()?;
                    self.append(vec![v])?;
                }
                b'e' => {
                    let vals = self.pop_mark()?;
                    self.append(vals)?;
                }
                b'}' => {
                    let v = self.arena.push(ObjKind::Dict, Vec::new(), Vec::new());
                    self.stack.push(v);
                }
                b'd' => {
                    let vals = self.pop_mark()?;
                    let v = self.arena.push(ObjKind::Dict, Vec::new(), Vec::new());
                    self.stack.push(v);
                    self.set_items(vals)?;
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    self.set_items(vec![k, v])?;
                }
                b'u' => {
                    let vals = self.pop_mark()?;
                    self.set_items(vals)?;
                }
                b')' => self.tuple(Vec::new()),
                b't' => {
                    let items = self.pop_mark()?;
                    self.tuple(items);
                }
                0x85 => {
                    let a = self.pop()?;
                    self.tuple(vec![a]);
                }
                0x86 => {
                    let b = self.pop()?;
                    let a = self.pop()?;
                    self.tuple(vec![a, b]);
                }
                0x87 => {
                    let c = self.pop()?;
                    let b = self.pop()?;
                    let a = self.pop()?;
                    self.tuple(vec![a, b, c]);
                }
                0x8f => {
                    let v = self.arena.push(ObjKind::Set, Vec::new(), Vec::new());
                    self.stack.push(v);
                }
                0x90 => {
                    let vals = self.pop_mark()?;
                    self.append(vals)?;
                }
                0x91 => {
                    let items = self.pop_mark()?;
                    let v = self.arena.push(ObjKind::Set, items, Vec::new());
                    self.stack.push(v);
                }
                b'q' => {
                    let id = self.u8()?;
                    self.memo_put(u64::from(id))?;
                }
                b'r' => {
                    let id = u32::from_le_bytes(self.le::<4>()?);
                    self.memo_put(u64::from(id))?;
                }
                0x94 => {
                    let id = self.memo.len() as u64;
                    self.memo_put(id)?;
                }
                b'h' => {
                    let id = self.u8()?;
                    self.memo_get(u64::from(id))?;
                }
                b'j' => {
                    let id = u32::from_le_bytes(self.le::<4>()?);
                    self.memo_get(u64::from(id))?;
                }
                other => {
                    return Err(format!(
                        "opcode {other:#04x} at byte {at} is not one of plain data's (dicts, lists, strings, numbers)"
                    ))
                }
            }
        }
    }
}

/// A little-endian two's-complement integer (LONG1/LONG4).
fn long_le(b: &[u8]) -> Val {
    if b.is_empty() {
        return Val::Int(0);
    }
    if b.len() > 8 {
        // Fits only if the extra bytes are sign extension.
        let (low, high) = b.split_at(8);
        let neg = low.last().is_some_and(|x| x & 0x80 != 0);
        let fill = if neg { 0xff } else { 0 };
        if high.iter().any(|&x| x != fill) {
            return Val::BigInt;
        }
        return long_le(low);
    }
    let neg = b.last().is_some_and(|x| x & 0x80 != 0);
    let mut buf = if neg { [0xffu8; 8] } else { [0u8; 8] };
    if let Some(dst) = buf.get_mut(..b.len()) {
        dst.copy_from_slice(b);
    }
    Val::Int(i64::from_le_bytes(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longs() {
        assert_eq!(long_le(&[]), Val::Int(0));
        assert_eq!(long_le(&[0xff]), Val::Int(-1));
        assert_eq!(long_le(&[0x00, 0x01]), Val::Int(256));
        assert_eq!(
            long_le(&[0, 0, 0, 0, 0, 0, 0, 0x80, 0xff]),
            Val::Int(i64::MIN)
        );
        assert_eq!(long_le(&[0, 0, 0, 0, 0, 0, 0, 0, 1]), Val::BigInt);
        assert_eq!(long_le(&[1, 0, 0, 0, 0, 0, 0, 0, 0]), Val::Int(1));
    }

    #[test]
    fn shared_objects_are_stored_once() {
        // Protocol 4 for: f = {"a": 1}; [f, f]  (pickle.dumps([f, f], protocol=4)).
        let data =
            b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00]\x94(}\x94\x8c\x01a\x94K\x01sh\x01e.";
        let (arena, root) = decode(data).expect("decodes");
        let list = arena.obj(&root).expect("a list");
        assert_eq!(list.items.len(), 2);
        assert_eq!(list.items.first(), list.items.get(1));
        assert_eq!(arena.objs.len(), 2);
    }
}
