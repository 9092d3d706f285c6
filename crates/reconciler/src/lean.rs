//! Objects parsed without `metadata.managedFields` (issue 16).
//!
//! Every object the API server sends carries its field managers' sets (`managedFields`), and
//! k8s-openapi parses each `fieldsV1` into a tree of `serde_json` maps: for a Secret or a
//! Deployment most of the allocations its parse makes. kamaji-rs never reads them. At 1,000
//! tenants the initial lists of a restarted manager's watches held 46 of its 64 MiB peak heap
//! in those trees (heaptrack), all of them freed at once after each page was parsed.
//!
//! [`Lean<K>`] is `K` parsed with `metadata.managedFields` skipped in the parser (a serde
//! deserializer in front of the real one that drops the key), so the trees are never built;
//! everything else of the object is parsed as `K` parses it. Its [`Resource`] is `K`'s, so
//! `Api<Lean<K>>` makes the same requests as `Api<K>` (metadata-only ones for
//! `Lean<PartialObjectMeta<_>>`).

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::watcher;
use serde::de::value::CowStrDeserializer;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

/// `K` as parsed without `metadata.managedFields` (`None` after the parse): see the module.
/// Serializes as `K`.
#[derive(Clone, Debug, Serialize)]
#[serde(transparent)]
pub struct Lean<K>(pub K);

impl<'de, K: Deserialize<'de>> Deserialize<'de> for Lean<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        K::deserialize(Skipping {
            inner: deserializer,
            level: Level::Object,
        })
        .map(Lean)
    }
}

impl<K: Resource> Resource for Lean<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }

    fn api_version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::api_version(dt)
    }

    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn metadata_api() -> bool {
        K::metadata_api()
    }

    fn url_path(dt: &Self::DynamicType, namespace: Option<&str>) -> String {
        K::url_path(dt, namespace)
    }

    fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0.meta_mut()
    }
}

/// The watch event of a [`Lean<K>`] watch as one of `K`.
#[must_use]
pub fn event<K>(event: watcher::Event<Lean<K>>) -> watcher::Event<K> {
    use watcher::Event;
    match event {
        Event::Apply(o) => Event::Apply(o.0),
        Event::Delete(o) => Event::Delete(o.0),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(o.0),
        Event::InitDone => Event::InitDone,
    }
}

/// Where in the object the parser is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    /// The object: its `metadata` value is parsed at [`Level::Metadata`].
    Object,
    /// Its `metadata`: the `managedFields` key and its value are skipped.
    Metadata,
}

/// A deserializer in front of `inner` that hands a map's visitor [`SkippingMap`] at `level`
/// (also inside an `Option` or a newtype, as k8s-openapi reads `metadata`); every other value
/// goes to the caller's visitor unchanged.
struct Skipping<D> {
    inner: D,
    level: Level,
}

/// `visitor` of a map at `level`.
struct SkippingVisitor<V> {
    visitor: V,
    level: Level,
}

/// The entries of a map at `level`, without the skipped one.
struct SkippingMap<A> {
    map: A,
    level: Level,
    /// The key just read was `metadata` (at [`Level::Object`]).
    metadata_next: bool,
}

/// The seed of the `metadata` value: parses it at [`Level::Metadata`].
struct MetadataSeed<S>(S);

macro_rules! forward {
    ($($method:ident),* $(,)?) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
                self.inner.$method(visitor)
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Skipping<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        let level = self.level;
        self.inner
            .deserialize_any(SkippingVisitor { visitor, level })
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        let level = self.level;
        self.inner
            .deserialize_map(SkippingVisitor { visitor, level })
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let level = self.level;
        self.inner
            .deserialize_struct(name, fields, SkippingVisitor { visitor, level })
    }

    forward!(
        deserialize_bool,
        deserialize_i8,
        deserialize_i16,
        deserialize_i32,
        deserialize_i64,
        deserialize_i128,
        deserialize_u8,
        deserialize_u16,
        deserialize_u32,
        deserialize_u64,
        deserialize_u128,
        deserialize_f32,
        deserialize_f64,
        deserialize_char,
        deserialize_str,
        deserialize_string,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_unit,
        deserialize_seq,
        deserialize_identifier,
        deserialize_ignored_any,
    );

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        let level = self.level;
        self.inner
            .deserialize_option(SkippingVisitor { visitor, level })
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.inner.deserialize_unit_struct(name, visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let level = self.level;
        self.inner
            .deserialize_newtype_struct(name, SkippingVisitor { visitor, level })
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.inner.deserialize_tuple(len, visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.inner.deserialize_tuple_struct(name, len, visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.inner.deserialize_enum(name, variants, visitor)
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

impl<'de, V: Visitor<'de>> Visitor<'de> for SkippingVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.visitor.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_map(SkippingMap {
            map,
            level: self.level,
            metadata_next: false,
        })
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_seq(seq)
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.visitor.visit_unit()
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.visitor.visit_none()
    }

    fn visit_some<D: Deserializer<'de>>(self, inner: D) -> Result<V::Value, D::Error> {
        self.visitor.visit_some(Skipping {
            inner,
            level: self.level,
        })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, inner: D) -> Result<V::Value, D::Error> {
        self.visitor.visit_newtype_struct(Skipping {
            inner,
            level: self.level,
        })
    }
}

/// A map key as read, borrowed from the input when it can be.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map key")
            }

            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for SkippingMap<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        loop {
            let Some(Key(key)) = self.map.next_key::<Key<'de>>()? else {
                return Ok(None);
            };
            match self.level {
                Level::Metadata if key == "managedFields" => {
                    self.map.next_value::<IgnoredAny>()?;
                }
                level => {
                    self.metadata_next = level == Level::Object && key == "metadata";
                    return seed.deserialize(CowStrDeserializer::new(key)).map(Some);
                }
            }
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        if std::mem::take(&mut self.metadata_next) {
            self.map.next_value_seed(MetadataSeed(seed))
        } else {
            self.map.next_value_seed(seed)
        }
    }

    fn size_hint(&self) -> Option<usize> {
        self.map.size_hint()
    }
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for MetadataSeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Skipping {
            inner: deserializer,
            level: Level::Metadata,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Secret;
    use kube::core::{ObjectList, PartialObjectMeta, WatchEvent};

    const SECRET: &str = r#"{
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {
            "name": "demo-kubeconfig", "namespace": "a", "uid": "u1", "resourceVersion": "7",
            "labels": {"cluster.x-k8s.io/cluster-name": "demo"},
            "managedFields": [{"manager": "kamaji-rs", "operation": "Apply", "apiVersion": "v1",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:value": {}}}}],
            "ownerReferences": [{"apiVersion": "controlplane.cluster.x-k8s.io/v1alpha2",
                "kind": "KamajiControlPlane", "name": "demo", "uid": "k1", "controller": true}]
        },
        "data": {"value": "a3ViZWNvbmZpZw=="},
        "type": "cluster.x-k8s.io/secret"
    }"#;

    /// Parsed as `K` is, but without `metadata.managedFields`: in an object, in a list's
    /// items and in a watch event, and as metadata only; a `managedFields` key anywhere but
    /// in `metadata` is kept.
    #[test]
    fn an_object_is_parsed_whole_but_for_its_managed_fields() {
        let full: Secret = serde_json::from_str(SECRET).expect("secret");
        assert!(
            full.metadata.managed_fields.is_some(),
            "the fixture has them"
        );
        let mut want = full.clone();
        want.metadata.managed_fields = None;

        let lean: Lean<Secret> = serde_json::from_str(SECRET).expect("lean");
        assert_eq!(lean.0, want);

        let list = format!(
            r#"{{"apiVersion": "v1", "kind": "SecretList", "metadata": {{"resourceVersion": "9"}}, "items": [{SECRET}, {SECRET}]}}"#
        );
        let items: ObjectList<Lean<Secret>> = serde_json::from_str(&list).expect("list");
        assert_eq!(items.items.len(), 2);
        assert!(items.items.iter().all(|s| s.0 == want));

        let watch = format!(r#"{{"type": "MODIFIED", "object": {SECRET}}}"#);
        let Ok(WatchEvent::Modified(event)) =
            serde_json::from_str::<WatchEvent<Lean<Secret>>>(&watch)
        else {
            panic!("not a MODIFIED event");
        };
        assert_eq!(event.0, want);

        let meta: Lean<PartialObjectMeta<Secret>> = serde_json::from_str(SECRET).expect("meta");
        assert_eq!(meta.0.metadata, want.metadata);

        // A serde-derived custom resource (metadata not optional) and a Cluster.
        let managed = r#""managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}]"#;
        let kcp = format!(
            r#"{{"apiVersion": "controlplane.cluster.x-k8s.io/v1alpha2", "kind": "KamajiControlPlane", "metadata": {{"name": "demo", {managed}}}, "spec": {{"version": "v1.33.0"}}}}"#
        );
        let lean: Lean<kamaji_api::KamajiControlPlane> = serde_json::from_str(&kcp).expect("kcp");
        assert_eq!(lean.0.metadata.name.as_deref(), Some("demo"));
        assert_eq!(lean.0.metadata.managed_fields, None);
        assert_eq!(lean.0.spec.version, "v1.33.0");
        let cluster = format!(
            r#"{{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {{{managed}, "name": "demo"}}, "spec": {{}}}}"#
        );
        let lean: Lean<kamaji_api::cluster::v1beta2::Cluster> =
            serde_json::from_str(&cluster).expect("cluster");
        assert_eq!(lean.0.metadata.name.as_deref(), Some("demo"));
        assert_eq!(lean.0.metadata.managed_fields, None);

        // Only metadata's `managedFields` goes: a data key of that name stays.
        let data = SECRET.replace(r#""value": "a3"#, r#""managedFields": "a3"#);
        let lean: Lean<Secret> = serde_json::from_str(&data).expect("data key");
        assert!(lean.0.data.expect("data").contains_key("managedFields"));
    }

    /// A parse error is `K`'s, at the same place.
    #[test]
    fn a_bad_object_fails_as_it_would_without_skipping() {
        let bad = SECRET.replace(r#""uid": "u1""#, r#""uid": 5"#);
        let full = serde_json::from_str::<Secret>(&bad).expect_err("full");
        let lean = serde_json::from_str::<Lean<Secret>>(&bad).expect_err("lean");
        assert_eq!(lean.to_string(), full.to_string());
    }
}
