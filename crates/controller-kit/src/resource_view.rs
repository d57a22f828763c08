//! A lean view of a built-in resource: a type that reads the same API
//! objects into only the fields a controller uses (Mokka's `NodeMeta`,
//! gpuid's `DevicePluginPod`), so serde skips the rest while it parses and
//! the cache holds no inline structs for it. Requests are unchanged: the
//! view addresses the resource it views.

/// Implements `kube::Resource` for `$view` as the resource `$of` (kind,
/// group, version, plural), with `$scope` and its `metadata` field. The
/// view must have a `metadata: ObjectMeta` field.
#[macro_export]
macro_rules! resource_view {
    ($view:ty, $of:ty, $scope:ty) => {
        impl $crate::__kube::core::Resource for $view {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(_: &()) -> ::std::borrow::Cow<'_, str> {
                <$of as $crate::__kube::core::Resource>::kind(&())
            }

            fn group(_: &()) -> ::std::borrow::Cow<'_, str> {
                <$of as $crate::__kube::core::Resource>::group(&())
            }

            fn version(_: &()) -> ::std::borrow::Cow<'_, str> {
                <$of as $crate::__kube::core::Resource>::version(&())
            }

            fn api_version(_: &()) -> ::std::borrow::Cow<'_, str> {
                <$of as $crate::__kube::core::Resource>::api_version(&())
            }

            fn plural(_: &()) -> ::std::borrow::Cow<'_, str> {
                <$of as $crate::__kube::core::Resource>::plural(&())
            }

            fn meta(&self) -> &$crate::__kube::api::ObjectMeta {
                &self.metadata
            }

            fn meta_mut(&mut self) -> &mut $crate::__kube::api::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
