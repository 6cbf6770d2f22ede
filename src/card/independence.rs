//! Independence reduction: split a fixture into parts that cannot affect each other.
//!
//! Two deliveries can influence each other's decisions only through a card they both name or
//! an event id they share (a changed payload pauses the first record's card too). Deliveries
//! that share neither commute: the receiver's state after both is the same in either order,
//! and no property looks across them. So the fixture splits into connected components of
//! deliveries, cards and event ids, each with its own initial cards, authority snapshots and
//! share of `expect`, and the product of their state spaces becomes a sum.
//!
//! Each part is checked with the whole fault budget, which explores at least every fault
//! placement the whole fixture allows (so a part's verdict is never laxer); `tests/model.rs`
//! compares full and split verdicts on generated fixtures.

use crate::card::fixture::{RawExpect, RawFixture, Scenario};
use crate::harness::InputError;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// A node of the dependency graph.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Node {
    Card(String),
    Event(String),
    Delivery(u32),
}

/// Union-find over nodes.
#[derive(Default)]
struct Components {
    index: BTreeMap<Node, usize>,
    parent: Vec<usize>,
}

impl Components {
    fn node(&mut self, node: Node) -> usize {
        let next = self.parent.len();
        let id = *self.index.entry(node).or_insert(next);
        if id == next {
            self.parent.push(next);
        }
        id
    }

    fn root(&mut self, mut id: usize) -> usize {
        while self.parent[id] != id {
            self.parent[id] = self.parent[self.parent[id]];
            id = self.parent[id];
        }
        id
    }

    fn join(&mut self, a: Node, b: Node) {
        let (a, b) = (self.node(a), self.node(b));
        let (a, b) = (self.root(a), self.root(b));
        if a != b {
            self.parent[a.max(b)] = a.min(b);
        }
    }

    fn root_of(&mut self, node: Node) -> usize {
        let id = self.node(node);
        self.root(id)
    }
}

fn string_field<'a>(event: &'a Value, key: &str) -> Option<&'a str> {
    event.as_object()?.get(key)?.as_str()
}

/// The name an input has in `expect.unresolved`.
fn input_name(delivery: u32, event: &Value) -> String {
    string_field(event, "event_id").map_or_else(|| format!("delivery-{delivery}"), str::to_owned)
}

/// Every card a part names: initial, with authority, or named by a delivery.
fn cards_of(piece: &RawFixture) -> BTreeSet<String> {
    let delivered = piece
        .deliveries
        .iter()
        .filter_map(|delivery| string_field(&delivery.event, "object_id").map(str::to_owned));
    piece
        .initial
        .keys()
        .cloned()
        .chain(
            piece
                .authority
                .iter()
                .map(|snapshot| snapshot.object_id.clone()),
        )
        .chain(delivered)
        .collect()
}

/// The part of component `root`, created empty on first use.
fn part<'a>(
    parts: &'a mut BTreeMap<usize, RawFixture>,
    order: &mut Vec<usize>,
    raw: &RawFixture,
    root: usize,
) -> &'a mut RawFixture {
    if !order.contains(&root) {
        order.push(root);
    }
    parts.entry(root).or_insert_with(|| RawFixture {
        initial: BTreeMap::new(),
        deliveries: Vec::new(),
        authority: Vec::new(),
        schedule: None,
        trace: None,
        expect: None,
        conform: None,
        ..raw.clone()
    })
}

/// Splits a fixture into independent parts (at least one). A fixture with a `schedule` is
/// not split: its order is one run, not a space.
pub fn split(scenario: &Scenario) -> Result<Vec<Scenario>, InputError> {
    let raw = &scenario.raw;
    if raw.schedule.is_some() {
        return Ok(vec![scenario.clone()]);
    }
    let mut graph = Components::default();
    for name in raw.initial.keys() {
        graph.node(Node::Card(name.clone()));
    }
    for snapshot in &raw.authority {
        graph.node(Node::Card(snapshot.object_id.clone()));
    }
    for delivery in &raw.deliveries {
        let node = Node::Delivery(delivery.delivery);
        graph.node(node.clone());
        if let Some(card) = string_field(&delivery.event, "object_id") {
            graph.join(node.clone(), Node::Card(card.to_owned()));
        }
        if let Some(id) = string_field(&delivery.event, "event_id") {
            graph.join(node, Node::Event(id.to_owned()));
        }
    }
    // Group everything by component, keeping file order.
    let mut parts: BTreeMap<usize, RawFixture> = BTreeMap::new();
    let mut order: Vec<usize> = Vec::new();
    for (name, card) in &raw.initial {
        let root = graph.root_of(Node::Card(name.clone()));
        part(&mut parts, &mut order, raw, root)
            .initial
            .insert(name.clone(), card.clone());
    }
    for snapshot in &raw.authority {
        let root = graph.root_of(Node::Card(snapshot.object_id.clone()));
        part(&mut parts, &mut order, raw, root)
            .authority
            .push(snapshot.clone());
    }
    for delivery in &raw.deliveries {
        let root = graph.root_of(Node::Delivery(delivery.delivery));
        part(&mut parts, &mut order, raw, root)
            .deliveries
            .push(delivery.clone());
    }
    // An expectation that names a card or input no part has stays with the first part, so
    // it fails there as it fails in the whole.
    let placed_cards: BTreeSet<String> = parts.values().flat_map(cards_of).collect();
    let placed_inputs: BTreeSet<String> = raw
        .deliveries
        .iter()
        .map(|delivery| input_name(delivery.delivery, &delivery.event))
        .collect();
    let count = order.len();
    let mut scenarios = Vec::with_capacity(count);
    for (position, root) in order.into_iter().enumerate() {
        let mut piece = parts.remove(&root).expect("every root has a part");
        let first = position == 0;
        let cards = cards_of(&piece);
        let inputs: BTreeSet<String> = piece
            .deliveries
            .iter()
            .map(|delivery| input_name(delivery.delivery, &delivery.event))
            .collect();
        piece.expect = raw.expect.as_ref().map(|expect| RawExpect {
            final_cards: expect
                .final_cards
                .iter()
                .filter(|(name, _)| {
                    cards.contains(*name) || (first && !placed_cards.contains(*name))
                })
                .map(|(name, card)| (name.clone(), card.clone()))
                .collect(),
            replacements: None,
            unresolved: expect
                .unresolved
                .iter()
                .filter(|name| inputs.contains(*name) || (first && !placed_inputs.contains(*name)))
                .cloned()
                .collect(),
            paused: expect.paused.as_ref().map(|paused| {
                paused
                    .iter()
                    .filter(|name| {
                        cards.contains(*name) || (first && !placed_cards.contains(*name))
                    })
                    .cloned()
                    .collect()
            }),
        });
        piece.name = Some(format!("{} part {}/{count}", scenario.name, position + 1));
        scenarios.push(Scenario::from_raw(&scenario.file, piece)?);
    }
    Ok(scenarios)
}
